package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shardcache/shardcache/ring"
)

// TestReaddedNodeWithOldKeys re-adds a node that still holds the values it
// had when it was removed: Reshard refuses it with ErrNodeNotEmpty, naming
// it, and moves nothing; once the node is flushed, the change goes through
// and every key reads its newest value. Before the check, the re-added node
// served the old values of the keys it owned again.
func TestReaddedNodeWithOldKeys(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		t.Parallel()
		ctx := context.Background()
		all, two := cl.nodes(0, 1, 2), cl.nodes(0, 1)
		c := cl.client(t, Options{Nodes: all})
		c.grace = 0
		keys := numberedKeys("readd", 300)
		for _, k := range keys {
			if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		onGone := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return c.Locate(k).Addr != cl.addrs[2] })
		if len(onGone) == 0 {
			t.Fatal("no key on the node to be removed")
		}
		// Node 2 leaves at once; the keys it held are written again on
		// the others.
		if err := c.Reshard(two, 0); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if err := c.Set(ctx, k, []byte("new"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}

		err := c.Reshard(all, time.Hour)
		if !errors.Is(err, ErrNodeNotEmpty) {
			t.Fatalf("Reshard adding back a node holding %d keys: %v, want ErrNodeNotEmpty", len(onGone), err)
		}
		t.Logf("refused: %v", err)
		if st := c.Migration(); st.Active || len(c.pools.Addrs()) != 2 {
			t.Fatalf("a refused Reshard changed the client: %+v, pools %v", st, c.pools.Addrs())
		}
		if err := c.CheckEmpty(ctx, cl.nodes(2)); !errors.Is(err, ErrNodeNotEmpty) {
			t.Fatalf("CheckEmpty of the node: %v, want ErrNodeNotEmpty", err)
		}
		if err := c.CheckEmpty(ctx, two); !errors.Is(err, ErrNodeNotEmpty) {
			t.Fatalf("CheckEmpty of nodes in use: %v, want ErrNodeNotEmpty", err)
		}

		flushNodes(t, cl, 2) // the remedy the error names

		if err := c.CheckEmpty(ctx, cl.nodes(2)); err != nil {
			t.Fatalf("CheckEmpty after the flush: %v", err)
		}
		if err := c.Reshard(all, time.Hour); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if v, err := c.Get(ctx, k); err != nil || string(v) != "new" {
				t.Fatalf("Get(%q) after the node came back = %q, %v; want new", k, v, err)
			}
		}
	})
}

// TestCheckEmptyUnreadable: a node that cannot be read fails the check with
// its error, not ErrNodeNotEmpty, and so does Reshard adding it.
func TestCheckEmptyUnreadable(t *testing.T) {
	cl := newCluster(t, "miniredis", 2)
	c := cl.client(t, Options{Nodes: cl.nodes(0)})
	cl.stop(1)
	var ne *NodeError
	if err := c.CheckEmpty(context.Background(), cl.nodes(1)); !errors.As(err, &ne) || errors.Is(err, ErrNodeNotEmpty) || ne.Node.Addr != cl.addrs[1] {
		t.Fatalf("CheckEmpty of a stopped node: %v, want its NodeError", err)
	}
	if err := c.Reshard(cl.nodes(0, 1), time.Hour); !errors.As(err, &ne) {
		t.Fatalf("Reshard adding a stopped node: %v, want its NodeError", err)
	}
	if err := c.CheckEmpty(context.Background(), []ring.Node{}); err != nil {
		t.Fatalf("CheckEmpty of no node: %v", err)
	}
	c.Close()
	if err := c.CheckEmpty(context.Background(), cl.nodes(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("CheckEmpty after Close: %v", err)
	}
}

// TestSkipEmptyCheck: with Options.SkipEmptyCheck, Reshard adds a node that
// holds keys, as a fleet whose every process calls it needs.
func TestSkipEmptyCheck(t *testing.T) {
	cl := newCluster(t, "miniredis", 2)
	ctx := context.Background()
	other := cl.client(t, Options{Nodes: cl.nodes(1)})
	if err := other.Set(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	c := cl.client(t, Options{Nodes: cl.nodes(0), SkipEmptyCheck: true})
	if err := c.Reshard(cl.nodes(0, 1), time.Hour); err != nil {
		t.Fatalf("Reshard with SkipEmptyCheck: %v", err)
	}
}

// flushNodes flushes the cluster's nodes idx, through a client of them
// alone: what ErrNodeNotEmpty asks of a node added back.
func flushNodes(t testing.TB, cl *cluster, idx ...int) {
	t.Helper()
	if err := cl.client(t, Options{Nodes: cl.nodes(idx...)}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestReaddedNodeWithReplicas: with two copies of each key, a node removed
// and added back holding its old copies is refused the same way.
func TestReaddedNodeWithReplicas(t *testing.T) {
	cl := newCluster(t, "miniredis", 4)
	ctx := context.Background()
	c := cl.client(t, Options{Nodes: cl.nodes(0, 1, 2, 3), Replicas: 2})
	c.grace = 0
	keys := numberedKeys("readd-r", 200)
	for _, k := range keys {
		if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Reshard(cl.nodes(0, 1, 2), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Reshard(cl.nodes(0, 1, 2, 3), time.Hour); !errors.Is(err, ErrNodeNotEmpty) {
		t.Fatalf("Reshard adding back a replica node that holds keys: %v, want ErrNodeNotEmpty", err)
	}
	flushNodes(t, cl, 3)
	if err := c.Reshard(cl.nodes(0, 1, 2, 3), time.Hour); err != nil {
		t.Fatal(err)
	}
}
