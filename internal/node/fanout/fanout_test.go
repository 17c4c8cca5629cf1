package fanout_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/fanout"
	"github.com/shardcache/shardcache/internal/node/nodetest"
	"github.com/shardcache/shardcache/ring"
)

// TestManyNodes: past 8 nodes (linearBatches) the batches are found by a map;
// every key lands in its node's batch, in the caller's order, and a write
// round (Add, Run) reaches every node.
func TestManyNodes(t *testing.T) {
	cs := conns{}
	var nodes []ring.Node
	for i := range 24 {
		n := ring.Node{Name: "n" + strconv.Itoa(i), Addr: "h:" + strconv.Itoa(i)}
		nodes = append(nodes, n)
		cs[n.Addr] = nodetest.NewMap()
	}
	ctx := context.Background()
	bs := fanout.New(cs)
	for i := range 100 {
		bs.Add(nodes[i%len(nodes)], node.Item{Key: "k" + strconv.Itoa(i), Value: []byte{byte(i)}, TTL: time.Minute}, i, i%2 == 1)
	}
	bs.Run(func(b *fanout.Batch) error { return b.Conn.SetMulti(ctx, b.Items) })
	if len(bs.List) != len(nodes) {
		t.Fatalf("%d batches for %d nodes", len(bs.List), len(nodes))
	}
	for _, b := range bs.List {
		if b.Err != nil || b.Old != nil && len(b.Old) != len(b.Items) {
			t.Fatalf("batch %s: err %v, %d old marks for %d items", b.Node.Name, b.Err, len(b.Old), len(b.Items))
		}
		for j, k := range b.Keys {
			old := b.Old != nil && b.Old[j] // nil: no copy to an old owner in the batch
			if want := "k" + strconv.Itoa(b.Idx[j]); k != want || old != (b.Idx[j]%2 == 1) {
				t.Fatalf("batch %s: key %d is %s (old %v); want %s", b.Node.Name, j, k, old, want)
			}
		}
	}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	rd := fanout.Read(cs, keys, func(i int) ring.Node { return nodes[i%len(nodes)] })
	if len(rd.List) != len(nodes) {
		t.Fatalf("read: %d batches for %d nodes", len(rd.List), len(nodes))
	}
	for _, b := range rd.List {
		for j, i := range b.Idx {
			if b.Node != nodes[i%len(nodes)] || b.Keys[j] != keys[i] || j > 0 && i <= b.Idx[j-1] {
				t.Fatalf("read: key %d (%s) in the batch of %s at %d", i, b.Keys[j], b.Node.Name, j)
			}
		}
	}
	rd.Gets(ctx, true)
	var scratch node.Item
	found := 0
	for _, b := range rd.List {
		for i := range b.Answered() {
			if it := b.Answer(i, &scratch); it.Found && it.Value[0] == byte(b.Idx[i]) {
				found++
			}
		}
	}
	if found != 100 {
		t.Fatalf("read back %d of 100 keys", found)
	}
}

// TestSplit divides a write batch by key, keeping each item's position.
func TestSplit(t *testing.T) {
	b := &fanout.Batch{Node: ring.Node{Addr: "h:1"}, Keys: []string{"a", "b", "c"}, Items: []node.Item{{Key: "a"}, {Key: "b"}, {Key: "c"}}, Idx: []int{4, 5, 6}}
	parts := b.Split(func(k string) bool { return k == "b" })
	if parts[1] == nil || len(parts[1].Keys) != 1 || parts[1].Idx[0] != 5 || len(parts[0].Keys) != 2 || parts[0].Items[1].Key != "c" {
		t.Fatalf("split: %+v, %+v", parts[0], parts[1])
	}
	if all := b.Split(func(string) bool { return true }); all[1] != b || all[0] != nil {
		t.Fatal("a split where every key agrees made new batches")
	}
}

// TestDownNode: a key on a node held down fails in its own batch with the
// stand-in's error, the others unharmed.
func TestDownNode(t *testing.T) {
	m := nodetest.NewMap()
	ctx := context.Background()
	_ = m.Set(ctx, "x", []byte("1"), time.Minute)
	nodes := []ring.Node{{Addr: "h:1"}, {Addr: "gone:1"}}
	rd := fanout.Read(conns{"h:1": m}, []string{"x", "y"}, func(i int) ring.Node { return nodes[i] })
	rd.Gets(ctx, false)
	if rd.List[0].Err != nil || !rd.List[0].Ans[0].Found || !errors.Is(rd.List[1].Err, node.ErrNodeDown) {
		t.Fatalf("batches: %+v, %+v", rd.List[0], rd.List[1])
	}
}
