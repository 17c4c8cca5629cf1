package testserver

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Paused reports whether the server process is stopped, as Pause leaves it
// once SIGSTOP has taken effect (state T in /proc/PID/stat): from then on a
// request gets no answer until Resume. Pause returns when the signal is
// sent, which can be a moment before.
func (s *Server) Paused() bool {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command's name
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// CPU returns the CPU time the server process has run so far, summed over
// its threads (/proc/PID/task/TID/schedstat, in nanoseconds); zero when
// stopped. A benchmark reads it around its calls to tell the server's cost
// per call apart from the client's.
func (s *Server) CPU() time.Duration {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	dir := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var t time.Duration
	for _, task := range tasks {
		b, err := os.ReadFile(dir + "/" + task.Name() + "/schedstat")
		if err != nil {
			continue // the thread has exited
		}
		if f := bytes.Fields(b); len(f) > 0 {
			ns, _ := strconv.ParseInt(string(f[0]), 10, 64)
			t += time.Duration(ns)
		}
	}
	return t
}
