package node

import (
	"context"
	"time"
)

// Failing stands for a node every call of which fails at once with Err: a
// node held down (ErrNodeDown), or one the client has no connection to
// (ErrUnknownNode). Each call is told to Obs (nil: nobody) without a start,
// so it is counted but not timed: it never reached the network. It has
// every capability a node has, so that code asserting one sees the failure
// rather than none.
type Failing struct {
	Err error
	Obs Observer
}

// NewFailing returns the stand-in whose calls fail with err, told to obs.
func NewFailing(err error, obs Observer) *Failing { return &Failing{Err: err, Obs: obs} }

var (
	_ Node          = (*Failing)(nil)
	_ Items         = (*Failing)(nil)
	_ Sweeper       = (*Failing)(nil)
	_ Leaser        = (*Failing)(nil)
	_ UsageReporter = (*Failing)(nil)
	_ Refuser       = (*Failing)(nil)
)

// Refuse returns Err, uncounted: a command beyond the node interface is
// the caller's to count.
func (f *Failing) Refuse() error { return f.Err }

// Fail tells a call of kind op to the observer and returns the error.
func (f *Failing) Fail(op Op) error {
	if f.Obs != nil {
		f.Obs.Done(nil, op, time.Time{}, f.Err)
	}
	return f.Err
}

// Get fails with Err, told to Obs as an OpGet.
func (f *Failing) Get(context.Context, string) ([]byte, error) { return nil, f.Fail(OpGet) }

// GetMulti fails with Err, told to Obs as an OpGetMulti.
func (f *Failing) GetMulti(context.Context, []string, bool) ([]Item, error) {
	return nil, f.Fail(OpGetMulti)
}

// Send tells Obs of a failed OpGetMulti and returns a Pending whose
// Recv fails with Err.
func (f *Failing) Send(context.Context, []string) Pending {
	f.Fail(OpGetMulti)
	return (*failedPending)(f)
}

// Set fails with Err, told to Obs as an OpSet.
func (f *Failing) Set(context.Context, string, []byte, time.Duration) error { return f.Fail(OpSet) }

// SetMulti fails with Err, told to Obs as an OpSetMulti.
func (f *Failing) SetMulti(context.Context, []Item) error { return f.Fail(OpSetMulti) }

// Add fails with Err, told to Obs as an OpAdd.
func (f *Failing) Add(context.Context, string, []byte, time.Duration) error { return f.Fail(OpAdd) }

// AddMulti fails with Err, told to Obs as an OpAddMulti.
func (f *Failing) AddMulti(context.Context, []Item) ([]bool, error) {
	return nil, f.Fail(OpAddMulti)
}

// Delete fails with Err, told to Obs as an OpDelete.
func (f *Failing) Delete(context.Context, string) error { return f.Fail(OpDelete) }

// DeleteMulti fails with Err, told to Obs as an OpDeleteMulti.
func (f *Failing) DeleteMulti(context.Context, []string) error { return f.Fail(OpDeleteMulti) }

// Bury fails with Err, told to Obs as an OpDeleteMulti.
func (f *Failing) Bury(context.Context, []string, time.Duration, TombKind) ([]bool, error) {
	return nil, f.Fail(OpDeleteMulti)
}

// Incr fails with Err, told to Obs as an OpIncr.
func (f *Failing) Incr(context.Context, string, int64) (int64, error) { return 0, f.Fail(OpIncr) }

// Touch fails with Err, told to Obs as an OpTouch.
func (f *Failing) Touch(context.Context, string, time.Duration) error { return f.Fail(OpTouch) }

// Ping returns Err without telling Obs.
func (f *Failing) Ping(context.Context) error { return f.Err }

// Close does nothing and returns nil: there is no connection to close.
func (f *Failing) Close() error { return nil }

// GetItem returns Err without telling Obs.
func (f *Failing) GetItem(context.Context, string) (Item, error) { return Item{}, f.Err }

// Store returns Err without telling Obs.
func (f *Failing) Store(context.Context, StoreOp, Item) error { return f.Err }

// DeleteFound returns Err without telling Obs.
func (f *Failing) DeleteFound(context.Context, string) (bool, error) { return false, f.Err }

// Flush returns Err without telling Obs.
func (f *Failing) Flush(context.Context) error { return f.Err }

// GetAndTouch returns Err without telling Obs.
func (f *Failing) GetAndTouch(context.Context, string, time.Duration) (Item, error) {
	return Item{}, f.Err
}

// IncrDecr returns Err without telling Obs.
func (f *Failing) IncrDecr(context.Context, string, uint64, bool) (uint64, error) { return 0, f.Err }

// Scan returns Err without telling Obs.
func (f *Failing) Scan(context.Context, ScanOptions, func([]Item) error) error { return f.Err }

// Dump returns Err without telling Obs.
func (f *Failing) Dump(context.Context, []Item) ([]Item, error) { return nil, f.Err }

// Restore returns Err without telling Obs.
func (f *Failing) Restore(context.Context, []Item) ([]bool, error) { return nil, f.Err }

// Exists returns Err without telling Obs.
func (f *Failing) Exists(context.Context, []string) ([]bool, error) { return nil, f.Err }

// Size returns Err without telling Obs.
func (f *Failing) Size(context.Context) (int64, error) { return 0, f.Err }

// Usage returns Err without telling Obs.
func (f *Failing) Usage(context.Context) (Usage, error) { return Usage{}, f.Err }

// StoreLeased fails with Err, told to Obs as an OpLease.
func (f *Failing) StoreLeased(context.Context, []Item, []string, string) ([]bool, error) {
	return nil, f.Fail(OpLease)
}

// ReleaseLeases fails with Err, told to Obs as an OpLease.
func (f *Failing) ReleaseLeases(context.Context, []string, string) error { return f.Fail(OpLease) }

// failedPending is a multi-get that failed before it was sent.
type failedPending Failing

func (p *failedPending) Recv([]Answer) error { return p.Err }
