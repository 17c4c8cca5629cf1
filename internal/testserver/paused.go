package testserver

import (
	"bytes"
	"fmt"
	"os"
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
