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
	"strings"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind string

// Operation kinds. Load is not a call of the application's: it is
// GetOrLoad's (or GetMultiOrLoad's) loader, recorded as a write of the
// value it made for one key, which the client may or may not store.
const (
	Set       Kind = "set"
	Get       Kind = "get"
	Delete    Kind = "delete"
	Incr      Kind = "incr"
	GetMulti  Kind = "getmulti"
	GetOrLoad Kind = "getorload"
	Load      Kind = "load"
)

// More operation kinds (issue 42's workload); kinds.go says how the checker
// takes each.
//
//   - SetMulti writes Value to every key of Keys, one write per key. Failed,
//     it lists in Results (as AckedKey) the keys whose nodes all answered:
//     their writes were acknowledged all the same.
//   - DeleteMulti deletes every key of Keys, one delete per key, its
//     Results as SetMulti's.
//   - Add writes Value if the key is absent: OK, a write; NotStored, none.
//   - StoreCAS writes Value if the key is unchanged since the GetItem that
//     the worker ran just before (recorded apart): OK, a write; NotStored
//     (a conflict, or the key gone), none.
//   - Decr adds -1 to a counter, Result its new value, as Incr adds 1.
//   - GetMultiOrLoad reads Keys, Results its answer: a value the cache held
//     or one a Load made (each recorded apart, as GetOrLoad's).
//   - RedisGet is a GET through client.RedisDo, GetItem a client.GetItem:
//     reads as Get.
//   - Touch sets a key's TTL to none, as every value is written: it changes
//     no value, and the checker reads nothing from it.
const (
	SetMulti       Kind = "setmulti"
	DeleteMulti    Kind = "deletemulti"
	Add            Kind = "add"
	StoreCAS       Kind = "cas"
	Decr           Kind = "decr"
	GetMultiOrLoad Kind = "getmultiorload"
	RedisGet       Kind = "redisget"
	GetItem        Kind = "getitem"
	Touch          Kind = "touch"
)

// AckedKey is the value, in a failed SetMulti's or DeleteMulti's Results, of
// a key whose write was acknowledged by every node it went to.
const AckedKey = "ok"

// Status is how an operation ended.
type Status string

// Statuses. A Failed write may have been applied, then or at any later time
// (a request stuck in a stopped server's socket buffer is applied when it
// resumes); a Pending operation has no completion in the history (its
// process was killed while it ran) and is taken as failed. A Maybe write
// (a loaded value, which GetOrLoad stores unless its lease was lost or the
// store failed, and says nothing of it) may have been applied, but not after
// Comp.
//
// NotStored is a conditional write (Add, StoreCAS) that the cache refused:
// it wrote nothing.
const (
	OK        Status = "ok"
	Miss      Status = "miss"
	Failed    Status = "fail"
	Maybe     Status = "maybe"
	NotStored Status = "notstored"
	Pending   Status = ""
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
	// Keys is the operation's key, or a multi-key operation's keys.
	Keys []string
	// Value is the value a write (Set, Load, SetMulti, Add, StoreCAS)
	// wrote: unique among the key's writes in a history (a SetMulti writes
	// the same to each of its keys).
	Value string
	// TTL is the expiry a Set or a Load wrote Value with, 0 for none. The
	// checker takes a miss as explained once the value may have expired
	// (CheckWith). The workers write every value without expiry but the
	// loads of a run with stale-while-revalidate
	// (ClientConfig.StaleWhileRevalidate), recorded with Recorder.InvokeTTL.
	TTL time.Duration
	// Inv and Comp are when the call began and returned, wall-clock
	// nanoseconds of the one machine every process runs on; Comp is 0 for a
	// Pending operation.
	Inv, Comp int64
	Status    Status
	// Result is the value a Get or GetOrLoad returned, or Incr's counter.
	Result string
	// Results are GetMulti's hits; a key of Keys missing here was a miss.
	// For a failed SetMulti or DeleteMulti, the keys acknowledged all the
	// same (AckedKey).
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
	if o.Status == OK || o.Status == Miss || o.Status == Maybe || o.Status == NotStored {
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

// Event reports whether the record is a worker's action (a sweep, a
// reshard) recorded beside the faults, not a fault.
func (f Fault) Event() bool { return f.Kind == Sweep || f.Kind == Reshard }

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
	// Replicas is the copies of each key (client.Options.Replicas), 0 or 1
	// for one: a replica back from a fault has the keys it missed purged
	// (the client's hints), counters included.
	Replicas int `json:"replicas,omitempty"`
	// Gutter says the clients had a gutter pool (client.Options.Gutter):
	// a node's deletes made through it during a fault are applied at home
	// once it is back, so a counter there may restart then.
	Gutter bool `json:"gutter,omitempty"`
}

// History is the merged record of one run.
type History struct {
	Info   RunInfo
	Ops    []*Op
	Faults []Fault
	// Stats are the processes' closing statistics, one per incarnation
	// that exited normally.
	Stats []WorkerStats
	// Topologies are what the processes that follow a topology saw of it
	// (WorkerConfig.Follow), by time.
	Topologies []TopologyEvent
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
	// Backfills, BackfillsSkipped (refused: newer or buried),
	// DualWriteErrors and SweepCopied are the migration's counters in this
	// process, and FallbackHits and FallbackMisses its reads that missed
	// the new owner and then found the old one's copy, or nothing.
	Backfills, BackfillsSkipped, DualWriteErrors, SweepCopied int64
	FallbackHits, FallbackMisses                              int64
	// Stale and Refreshes are GetOrLoad's hits read in their refresh
	// window and the background reloads this process ran
	// (client.LoadStats), with StaleWhileRevalidate.
	Stale, Refreshes int64
	// Guttered counts the calls sent to the gutter pool in place of a
	// node held down (client.NodeHealth.Guttered).
	Guttered int64
}

// The file format: one record a line, its fields separated by tabs, so
// that a history greps and reads back fast (encoding/json took 25 µs a line
// under the race detector, where the harness's tests run):
//
//	i  proc inc goroutine seq at kind keys value          an invocation
//	r  proc inc goroutine seq at status =result hits err  a completion
//	j  {"info": ...} | {"fault": ...} | {"stats": ...}    the rest, as JSON
//	   | {"topology": ...}
//
// at is wall-clock nanoseconds; keys are joined with commas; the result, if
// any, follows an equals sign; hits are key=value pairs joined with commas. A field that holds a tab, a newline,
// a comma, an equals sign, a backslash or a leading quote is written quoted
// (strconv.Quote, with commas and equals signs as \x escapes); nothing the
// harness writes needs it but errors.
type meta struct {
	Info  *RunInfo       `json:"info,omitempty"`
	Fault *Fault         `json:"fault,omitempty"`
	Stats *WorkerStats   `json:"stats,omitempty"`
	Topo  *TopologyEvent `json:"topology,omitempty"`
}

// Recorder writes one process's history. Each record is one write(2), made
// before the call for an invocation, so that a process killed with SIGKILL
// leaves every operation it began in the file. It is safe for concurrent
// use.
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
	r.InvokeTTL(id, kind, keys, value, 0)
}

// InvokeTTL is Invoke of a write whose value expires after ttl (0: never),
// the ninth field of its line when not 0.
func (r *Recorder) InvokeTTL(id OpID, kind Kind, keys []string, value string, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.head('i', id)
	b = append(append(b, kind...), '\t')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = field(b, k)
	}
	b = append(b, '\t')
	b = field(b, value)
	if ttl != 0 {
		b = strconv.AppendInt(append(b, '\t'), int64(ttl), 10)
	}
	r.flush(b)
}

// Complete records the end of an operation, now: its status, the value read
// (result, for Get, GetOrLoad and Incr), GetMulti's hits, and the error.
func (r *Recorder) Complete(id OpID, st Status, result *string, results map[string]string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.head('r', id)
	b = append(append(b, st...), '\t')
	if result != nil {
		b = field(append(b, '='), *result)
	}
	b = append(b, '\t')
	first := true
	for k, v := range results {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(field(b, k), '=')
		b = field(b, v)
	}
	b = append(b, '\t')
	if err != nil {
		b = strconv.AppendQuote(b, err.Error())
	}
	r.flush(b)
}

// head starts a line: its type, the id and the time. r.mu is held.
func (r *Recorder) head(typ byte, id OpID) []byte {
	b := append(r.buf[:0], typ, '\t')
	b = strconv.AppendInt(b, int64(id.Proc), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(id.Incarnation), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(id.Goroutine), 10)
	b = append(b, '\t')
	b = strconv.AppendUint(b, id.Seq, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	return append(b, '\t')
}

// field appends s, quoted if it holds a separator.
func field(b []byte, s string) []byte {
	if s == "" || (s[0] != '"' && !strings.ContainsAny(s, "\t\n\r,=\\")) {
		return append(b, s...)
	}
	return append(b, quoteSeps.Replace(strconv.Quote(s))...)
}

// quoteSeps escapes the separators strconv.Quote leaves as they are.
var quoteSeps = strings.NewReplacer(",", `\x2c`, "=", `\x3d`)

// unfield undoes field.
func unfield(s string) (string, error) {
	if s == "" || s[0] != '"' {
		return s, nil
	}
	return strconv.Unquote(s)
}

// Info records the run's description.
func (r *Recorder) Info(info RunInfo) { r.meta(meta{Info: &info}) }

// Fault records a fault applied.
func (r *Recorder) Fault(f Fault) { r.meta(meta{Fault: &f}) }

// Stats records a process's closing statistics.
func (r *Recorder) Stats(s WorkerStats) { r.meta(meta{Stats: &s}) }

// Topology records what a process saw of the topology it follows.
func (r *Recorder) Topology(e TopologyEvent) { r.meta(meta{Topo: &e}) }

func (r *Recorder) meta(m meta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, err := json.Marshal(m)
	if err != nil {
		r.err = err
		return
	}
	r.flush(append(append(r.buf[:0], 'j', '\t'), j...))
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// flush writes one line. r.mu is held.
func (r *Recorder) flush(b []byte) {
	b = append(b, '\n')
	r.buf = b
	if r.err != nil {
		return
	}
	if _, err := r.w.Write(b); err != nil {
		r.err = err
	}
}

// ReadFiles merges the history files of a run, in any order, reading them
// in parallel.
func ReadFiles(paths ...string) (*History, error) {
	parts := make([]*History, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Go(func() {
			f, err := os.Open(p)
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			if parts[i], err = readOne(f); err != nil {
				errs[i] = fmt.Errorf("%s: %w", p, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return merge(parts), nil
}

// Read merges histories written by Recorders. A line cut short, as the last
// one of a killed process could be, is skipped; any other bad line is
// ErrHistory. Every operation is in the history of the process that ran it.
func Read(rs ...io.Reader) (*History, error) {
	var parts []*History
	for _, r := range rs {
		h, err := readOne(r)
		if err != nil {
			return nil, err
		}
		parts = append(parts, h)
	}
	return merge(parts), nil
}

func merge(parts []*History) *History {
	h := new(History)
	for _, p := range parts {
		if p.Info.Start != 0 || p.Info.Backend != "" {
			h.Info = p.Info
		}
		h.Ops = append(h.Ops, p.Ops...)
		h.Faults = append(h.Faults, p.Faults...)
		h.Stats = append(h.Stats, p.Stats...)
		h.Topologies = append(h.Topologies, p.Topologies...)
	}
	h.sort()
	return h
}

func readOne(r io.Reader) (*History, error) {
	h := new(History)
	ops := make(map[OpID]*Op)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	var cut error // a bad line, fine only as the file's last
	for sc.Scan() {
		line++
		if cut != nil {
			return nil, cut
		}
		if err := h.add(ops, sc.Text()); err != nil {
			cut = fmt.Errorf("%w: line %d: %v", ErrHistory, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	h.Ops = make([]*Op, 0, len(ops))
	for _, o := range ops {
		h.Ops = append(h.Ops, o)
	}
	return h, nil
}

func (h *History) add(ops map[OpID]*Op, line string) error {
	typ, rest, _ := strings.Cut(line, "\t")
	switch typ {
	case "j":
		var m meta
		if err := json.Unmarshal([]byte(rest), &m); err != nil {
			return err
		}
		if m.Info != nil {
			h.Info = *m.Info
		}
		if m.Fault != nil {
			h.Faults = append(h.Faults, *m.Fault)
		}
		if m.Stats != nil {
			h.Stats = append(h.Stats, *m.Stats)
		}
		if m.Topo != nil {
			h.Topologies = append(h.Topologies, *m.Topo)
		}
		return nil
	case "i", "r":
	default:
		return fmt.Errorf("unknown record type %q", typ)
	}
	f := strings.Split(rest, "\t")
	if want := map[string]int{"i": 8, "r": 9}[typ]; len(f) != want && (typ != "i" || len(f) != 9) {
		return fmt.Errorf("%d fields, want %d", len(f), want)
	}
	var id OpID
	var nums [4]int64
	for i := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return err
		}
		nums[i] = n
	}
	id = OpID{Proc: int(nums[0]), Incarnation: int(nums[1]), Goroutine: int(nums[2]), Seq: uint64(nums[3])}
	at, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return err
	}
	if typ == "i" {
		if _, dup := ops[id]; dup {
			return fmt.Errorf("operation %v invoked twice", id)
		}
		o := &Op{ID: id, Kind: Kind(f[5]), Inv: at}
		if f[6] != "" {
			for _, k := range strings.Split(f[6], ",") {
				if k, err = unfield(k); err != nil {
					return err
				}
				o.Keys = append(o.Keys, k)
			}
		}
		if o.Value, err = unfield(f[7]); err != nil {
			return err
		}
		if len(f) == 9 {
			ttl, err := strconv.ParseInt(f[8], 10, 64)
			if err != nil {
				return err
			}
			o.TTL = time.Duration(ttl)
		}
		ops[id] = o
		return nil
	}
	o := ops[id]
	if o == nil {
		return fmt.Errorf("completion of %v, never invoked", id)
	}
	if o.Comp != 0 {
		return nil // a load's value returned to a second caller
	}
	o.Comp, o.Status = at, Status(f[5])
	if res, ok := strings.CutPrefix(f[6], "="); ok {
		if o.Result, err = unfield(res); err != nil {
			return err
		}
	}
	if f[7] != "" {
		o.Results = make(map[string]string)
		for _, kv := range strings.Split(f[7], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("hit %q", kv)
			}
			if k, err = unfield(k); err != nil {
				return err
			}
			if v, err = unfield(v); err != nil {
				return err
			}
			o.Results[k] = v
		}
	}
	if f[8] != "" {
		if o.Err, err = strconv.Unquote(f[8]); err != nil {
			return err
		}
	}
	return nil
}

// sort orders operations by invocation, then id, faults by start, and
// topology events by time.
func (h *History) sort() {
	sort.Slice(h.Ops, func(i, j int) bool {
		a, b := h.Ops[i], h.Ops[j]
		if a.Inv != b.Inv {
			return a.Inv < b.Inv
		}
		return a.ID.String() < b.ID.String()
	})
	sort.Slice(h.Faults, func(i, j int) bool { return h.Faults[i].Start < h.Faults[j].Start })
	sort.Slice(h.Topologies, func(i, j int) bool { return h.Topologies[i].At < h.Topologies[j].At })
}

// Value makes the unique value of a write: its operation's id, readable in
// a report, and findable in a server's dump.
func Value(id OpID) string {
	return "p" + strconv.Itoa(id.Proc) + "." + strconv.Itoa(id.Incarnation) +
		".g" + strconv.Itoa(id.Goroutine) + ".s" + strconv.FormatUint(id.Seq, 10)
}
