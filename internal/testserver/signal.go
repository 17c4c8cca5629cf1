package testserver

import "syscall"

// Pause stops the server process with SIGSTOP: it keeps its port and its
// connections, and the kernel still accepts new ones, but it answers
// nothing, as a hung host does. Resume continues it. Stop kills it with
// SIGKILL, paused or not.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// signal sends sig to the running process, failing the test if it is not
// running.
func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("testserver: signal %v to %s: not running", sig, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("testserver: signal %v to %s: %v", sig, s.Addr, err)
	}
}
