package testserver

import "testing"

// TestPauseResume checks that a paused server answers nothing and a resumed
// one answers again, with the same process.
func TestPauseResume(t *testing.T) {
	for name, start := range map[string]func(testing.TB, int) []*Server{"redis": Redis, "memcached": Memcached} {
		t.Run(name, func(t *testing.T) {
			s := start(t, 1)[0]
			pid := s.cmd.Process.Pid
			if err := s.probe(s.ports, pid); err != nil {
				t.Fatalf("before Pause: %v", err)
			}
			s.Pause()
			if err := s.probe(s.ports, pid); err == nil {
				t.Fatal("a paused server answered")
			}
			s.Resume()
			if err := s.probe(s.ports, pid); err != nil {
				t.Fatalf("after Resume: %v", err)
			}
		})
	}
}
