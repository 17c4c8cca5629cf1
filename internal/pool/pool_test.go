package pool

import (
	"errors"
	"slices"
	"testing"

	"github.com/shardcache/shardcache/ring"
)

type fakeConn struct {
	addr   string
	closed int
}

func (f *fakeConn) Close() error { f.closed++; return nil }

func TestSharedAndReferenceCounted(t *testing.T) {
	dialed := map[string]*fakeConn{}
	p := New(func(n ring.Node) (*fakeConn, error) {
		if n.Addr == "bad:1" {
			return nil, errors.New("refused")
		}
		c := &fakeConn{addr: n.Addr}
		dialed[n.Addr] = c
		return c, nil
	})
	old := []ring.Node{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
	grown := []ring.Node{{Name: "b", Addr: "b:1"}, {Name: "c", Addr: "c:1"}}
	c1, err := p.Acquire(old)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := p.Acquire(grown)
	if err != nil {
		t.Fatal(err)
	}
	if c1["b:1"] != c2["b:1"] || len(dialed) != 3 {
		t.Fatalf("b:1 not shared between placements: %d clients dialed", len(dialed))
	}
	if _, err := p.Acquire([]ring.Node{{Addr: "d:1"}, {Addr: "bad:1"}}); err == nil {
		t.Fatal("Acquire with a failing dial succeeded")
	}
	if dialed["d:1"].closed != 1 || slices.Contains(p.Addrs(), "d:1") {
		t.Fatal("a failed Acquire left d:1 open")
	}
	if err := p.Release(old); err != nil {
		t.Fatal(err)
	}
	if dialed["a:1"].closed != 1 || dialed["b:1"].closed != 0 {
		t.Fatalf("after releasing the old placement: a closed %d times, b %d; want 1, 0", dialed["a:1"].closed, dialed["b:1"].closed)
	}
	got := p.Addrs()
	slices.Sort(got)
	if !slices.Equal(got, []string{"b:1", "c:1"}) {
		t.Fatalf("open addresses %v, want [b:1 c:1]", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if dialed["b:1"].closed != 1 || dialed["c:1"].closed != 1 {
		t.Fatal("Close left clients open")
	}
	if _, err := p.Acquire(old); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
}
