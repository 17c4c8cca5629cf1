package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

// Operation kinds. Load is not a call of the application's: it is
// GetOrLoad's loader, recorded as a write of the value it made, which the
// client may or may not store.
const (
	Set       Kind = "set"
	Get       Kind = "get"
	Delete    Kind = "delete"
	Incr      Kind = "incr"
	GetMulti  Kind = "getmulti"
	GetOrLoad Kind = "getorload"
	Load      Kind = "load"
)

// Status is how an operation ended.
type Status string

// Statuses. A Failed write may have been applied, then or at any later time
// (a request stuck in a stopped server's socket buffer is applied when it
// resumes); a Pending operation has no completion in the history (its
// process was killed while it ran) and is taken as failed. A Maybe write
// (a loaded value, which GetOrLoad stores unless its lease was lost or the
// store failed, and says nothing of it) may have been applied, but not after
// Comp.
const (
	OK      Status = "ok"
	Miss    Status = "miss"
	Failed  Status = "fail"
	Maybe   Status = "maybe"
	Pending Status = ""
)

// Never is the completion time of an operation that never completed, or
// whose effect may come at any later time (a failed write).
const Never = math.MaxInt64

// ErrHistory means a history file that cannot be read: a malformed line, or
// a completion without its invocation.
var ErrHistory = errors.New("chaos: bad history")

// OpID names one operation: the process, its incarnation (a process killed
// and started again is a new incarnation), the goroutine and its sequence.
type OpID struct {
	Proc        int    `json:"p"`
	Incarnation int    `json:"n"`
	Goroutine   int    `json:"g"`
	Seq         uint64 `json:"s"`
}

// String prints the id as "p1.0 g3 #77".
func (id OpID) String() string {
	return fmt.Sprintf("p%d.%d g%d #%d", id.Proc, id.Incarnation, id.Goroutine, id.Seq)
}

// Op is one operation of a history, invocation and completion merged.
type Op struct {
	ID   OpID
	Kind Kind
	// Keys is the operation's key, or GetMulti's keys.
	Keys []string
	// Value is the value a Set or a Load wrote: unique in a history.
	Value string
	// Inv and Comp are when the call began and returned, wall-clock
	// nanoseconds of the one machine every process runs on; Comp is 0 for a
	// Pending operation.
	Inv, Comp int64
	Status    Status
	// Result is the value a Get or GetOrLoad returned, or Incr's counter.
	Result string
	// Results are GetMulti's hits; a key of Keys missing here was a miss.
	Results map[string]string
	// Err is the error of a Failed operation.
	Err string
}

// Key returns the operation's first key.
func (o *Op) Key() string {
	if len(o.Keys) == 0 {
		return ""
	}
	return o.Keys[0]
}

// End is when the operation's effect is over for certain: Comp, or Never
// for one whose effect may still come (Failed or Pending).
func (o *Op) End() int64 {
	if o.Status == OK || o.Status == Miss || o.Status == Maybe {
		return o.Comp
	}
	return Never
}

// Fault is one fault as the harness applied it.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Target names the node ("n3") or the client process ("p1").
	Target string `json:"target"`
	// Detail is what the fault was, such as "latency 40ms".
	Detail string `json:"detail,omitempty"`
	// Start and End are when it began (the signal, the toxic) and ended
	// (the restart done, the toxic removed), wall-clock nanoseconds.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// Wipes reports whether the fault may have deleted the keys of its node.
func (f Fault) Wipes() bool { return f.Kind == KillServer }

// RunInfo describes one run: what the checker needs besides operations.
type RunInfo struct {
	Backend string `json:"backend"`
	Seed    uint64 `json:"seed"`
	// Start is the run's start, from which reports count time.
	Start int64 `json:"start"`
	// MigrationStart and MigrationEnd bound the migration's window, 0
	// without one: a key the old owners alone held may be lost at its end.
	MigrationStart int64 `json:"migration_start,omitempty"`
	MigrationEnd   int64 `json:"migration_end,omitempty"`
	// Schedule is the fault schedule, as Schedule.String prints it.
	Schedule string `json:"schedule,omitempty"`
}

// History is the merged record of one run.
type History struct {
	Info   RunInfo
	Ops    []*Op
	Faults []Fault
	// Stats are the processes' closing statistics, one per incarnation
	// that exited normally.
	Stats []WorkerStats
}

// WorkerStats is what a worker process saw of its client at exit.
type WorkerStats struct {
	Proc        int `json:"p"`
	Incarnation int `json:"n"`
	// Ops counts the operations the process ran.
	Ops int64 `json:"ops"`
	// Downs counts the times the client marked a node down (its breaker
	// opened), and Dropped and Missed what FailOpen dropped and missed.
	Downs, Dropped, Missed int64
	// Backfills, BackfillsRevoked and SweepCopied are the migration's
	// counters in this process.
	Backfills, BackfillsRevoked, SweepCopied int64
}

// record is one line of a history file.
type record struct {
	// T is "inv", "ret" (an operation's two halves), "info", "fault" or
	// "stats".
	T  string `json:"t"`
	ID *OpID  `json:"id,omitempty"`
	// At is the time of an invocation or a completion.
	At      int64             `json:"at,omitempty"`
	Kind    Kind              `json:"k,omitempty"`
	Keys    []string          `json:"keys,omitempty"`
	Value   string            `json:"v,omitempty"`
	Status  Status            `json:"st,omitempty"`
	Result  *string           `json:"r,omitempty"`
	Results map[string]string `json:"rs,omitempty"`
	Err     string            `json:"err,omitempty"`
	Info    *RunInfo          `json:"info,omitempty"`
	Fault   *Fault            `json:"fault,omitempty"`
	Stats   *WorkerStats      `json:"stats,omitempty"`
}

// Recorder writes one process's history as JSON lines. Each record is one
// write(2), made before the call for an invocation, so that a process killed
// with SIGKILL leaves every operation it began in the file. It is safe for
// concurrent use.
type Recorder struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewRecorder records to w, which should be unbuffered (an *os.File).
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: w} }

// Invoke records the start of an operation, now. value is what a write
// writes; keys are the operation's keys.
func (r *Recorder) Invoke(id OpID, kind Kind, keys []string, value string) {
	r.write(record{T: "inv", ID: &id, At: time.Now().UnixNano(), Kind: kind, Keys: keys, Value: value})
}

// Complete records the end of an operation, now: its status, the value read
// (result, for Get, GetOrLoad and Incr), GetMulti's hits, and the error.
func (r *Recorder) Complete(id OpID, st Status, result *string, results map[string]string, err error) {
	rec := record{T: "ret", ID: &id, At: time.Now().UnixNano(), Status: st, Result: result, Results: results}
	if err != nil {
		rec.Err = err.Error()
	}
	r.write(rec)
}

// Info records the run's description.
func (r *Recorder) Info(info RunInfo) { r.write(record{T: "info", Info: &info}) }

// Fault records a fault applied.
func (r *Recorder) Fault(f Fault) { r.write(record{T: "fault", Fault: &f}) }

// Stats records a process's closing statistics.
func (r *Recorder) Stats(s WorkerStats) { r.write(record{T: "stats", Stats: &s}) }

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Recorder) write(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		r.err = err
		return
	}
	r.buf = append(append(r.buf[:0], b...), '\n')
	if _, err := r.w.Write(r.buf); err != nil {
		r.err = err
	}
}

// ReadFiles merges the history files of a run, in any order.
func ReadFiles(paths ...string) (*History, error) {
	var rs []io.Reader
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rs = append(rs, f)
	}
	return Read(rs...)
}

// Read merges histories written by Recorders. A line cut short, as the last
// one of a killed process can be, is skipped; any other bad line is
// ErrHistory.
func Read(rs ...io.Reader) (*History, error) {
	h := new(History)
	ops := make(map[OpID]*Op)
	for i, r := range rs {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		line := 0
		var cut error // a bad line, fine only as the file's last
		for sc.Scan() {
			line++
			if cut != nil {
				return nil, cut
			}
			var rec record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				cut = fmt.Errorf("%w: file %d line %d: %v", ErrHistory, i, line, err)
				continue
			}
			if err := h.add(ops, rec); err != nil {
				return nil, fmt.Errorf("%w: file %d line %d: %v", ErrHistory, i, line, err)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	for _, o := range ops {
		h.Ops = append(h.Ops, o)
	}
	h.sort()
	return h, nil
}

func (h *History) add(ops map[OpID]*Op, rec record) error {
	switch rec.T {
	case "inv":
		if rec.ID == nil {
			return errors.New("invocation without id")
		}
		if _, dup := ops[*rec.ID]; dup {
			return fmt.Errorf("operation %v invoked twice", *rec.ID)
		}
		ops[*rec.ID] = &Op{ID: *rec.ID, Kind: rec.Kind, Keys: rec.Keys, Value: rec.Value, Inv: rec.At}
	case "ret":
		if rec.ID == nil {
			return errors.New("completion without id")
		}
		o := ops[*rec.ID]
		if o == nil {
			return fmt.Errorf("completion of %v, never invoked", *rec.ID)
		}
		if o.Comp != 0 {
			return nil // a load's value returned to a second caller
		}
		o.Comp, o.Status, o.Results, o.Err = rec.At, rec.Status, rec.Results, rec.Err
		if rec.Result != nil {
			o.Result = *rec.Result
		}
	case "info":
		if rec.Info != nil {
			h.Info = *rec.Info
		}
	case "fault":
		if rec.Fault != nil {
			h.Faults = append(h.Faults, *rec.Fault)
		}
	case "stats":
		if rec.Stats != nil {
			h.Stats = append(h.Stats, *rec.Stats)
		}
	default:
		return fmt.Errorf("unknown record type %q", rec.T)
	}
	return nil
}

// sort orders operations by invocation, then id, and faults by start.
func (h *History) sort() {
	sort.Slice(h.Ops, func(i, j int) bool {
		a, b := h.Ops[i], h.Ops[j]
		if a.Inv != b.Inv {
			return a.Inv < b.Inv
		}
		return a.ID.String() < b.ID.String()
	})
	sort.Slice(h.Faults, func(i, j int) bool { return h.Faults[i].Start < h.Faults[j].Start })
}

// Value makes the unique value of a write: its operation's id, readable in
// a report, and findable in a server's dump.
func Value(id OpID) string {
	return "p" + strconv.Itoa(id.Proc) + "." + strconv.Itoa(id.Incarnation) +
		".g" + strconv.Itoa(id.Goroutine) + ".s" + strconv.FormatUint(id.Seq, 10)
}
