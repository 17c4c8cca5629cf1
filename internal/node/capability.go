package node

import (
	"context"
	"fmt"
	"time"
)

// ItemsOf returns n's item capability, or one whose every call fails with
// ErrUnsupported: for a wrapper of nodes (a replica set, a gutter) whose
// nodes are the caller's.
func ItemsOf(n Node) Items {
	if in, ok := n.(Items); ok {
		return in
	}
	return unsupported{}
}

// LeaserOf returns n's lease capability, or one whose every call fails
// with ErrUnsupported.
func LeaserOf(n Node) Leaser {
	if ln, ok := n.(Leaser); ok {
		return ln
	}
	return unsupported{}
}

// UsageOf returns n's usage capability, or one whose Usage fails with
// ErrUnsupported.
func UsageOf(n Node) UsageReporter {
	if u, ok := n.(UsageReporter); ok {
		return u
	}
	return unsupported{}
}

// SweeperOf returns n's sweep capability, nil without one.
func SweeperOf(n Node) Sweeper {
	sn, _ := n.(Sweeper)
	return sn
}

// ItemKeys returns the items' keys.
func ItemKeys(items []Item) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

// unsupported is the item, lease and usage capability of a node without
// them.
type unsupported struct{}

func (unsupported) GetItem(context.Context, string) (Item, error) { return Item{}, ErrUnsupported }
func (unsupported) Store(context.Context, StoreOp, Item) error    { return ErrUnsupported }
func (unsupported) GetAndTouch(context.Context, string, time.Duration) (Item, error) {
	return Item{}, ErrUnsupported
}
func (unsupported) IncrDecr(context.Context, string, uint64, bool) (uint64, error) {
	return 0, ErrUnsupported
}
func (unsupported) DeleteFound(context.Context, string) (bool, error) { return false, ErrUnsupported }
func (unsupported) Flush(context.Context) error                       { return ErrUnsupported }
func (unsupported) StoreLeased(context.Context, []Item, []string, string) ([]bool, error) {
	return nil, ErrUnsupported
}
func (unsupported) ReleaseLeases(context.Context, []string, string) error { return ErrUnsupported }
func (unsupported) Usage(context.Context) (Usage, error) {
	return Usage{}, fmt.Errorf("%w: the node cannot read its server's usage", ErrUnsupported)
}
