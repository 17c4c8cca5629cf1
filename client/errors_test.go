package client

import (
	"testing"

	"github.com/shardcache/shardcache/ring"
)

// TestNodeErrorNamesOnce: a node named by its address is said once.
func TestNodeErrorNamesOnce(t *testing.T) {
	for _, tc := range []struct {
		n    ring.Node
		want string
	}{
		{ring.Node{Name: "a", Addr: "h:1"}, "shardcache: get key \"k\" on node a (h:1): shardcache: node down"},
		{ring.Node{Name: "h:1", Addr: "h:1"}, "shardcache: get key \"k\" on node h:1: shardcache: node down"},
	} {
		err := &NodeError{Op: "get", Node: tc.n, Keys: []string{"k"}, Err: ErrNodeDown}
		if err.Error() != tc.want {
			t.Errorf("%v: %q, want %q", tc.n, err.Error(), tc.want)
		}
	}
}
