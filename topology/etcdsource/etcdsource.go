// Package etcdsource keeps a fleet's topology in etcd v3: one key holds the
// encoded topology (JSON, topofile.Parse), watched by every process, its mod
// revision the topology's Version; Publish writes it with a compare on the
// revision it replaces, so two publishers cannot clobber each other; each
// process registers the version it runs under a lease, so that Status can
// say "12 processes on version 8, 1 still on 7" before a migration starts,
// and a process that dies or is cut off leaves the count when its lease
// expires.
//
// It is a package of its own so that importing topology or the client never
// pulls in etcd's gRPC client.
package etcdsource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/shardcache/shardcache/topology"
	"github.com/shardcache/shardcache/topology/topofile"
)

// Errors of the package, wrapped with the key.
var (
	// ErrNotFound is a key that holds no topology. A watcher reports it and
	// keeps its last topology: a missing key never empties the ring.
	ErrNotFound = errors.New("shardcache/etcdsource: no topology at the key")
	// ErrDeleted is the key deleted while watched; as ErrNotFound.
	ErrDeleted = errors.New("shardcache/etcdsource: the topology's key was deleted")
	// ErrConflict is a Publish whose expected revision is not the key's:
	// someone published in between. Read the key again, and decide again.
	ErrConflict = errors.New("shardcache/etcdsource: the topology changed since it was read")
	// ErrBadValue is a key holding something that is not a valid topology
	// (it wraps topology's error too). A watcher reports it and keeps its
	// last topology.
	ErrBadValue = errors.New("shardcache/etcdsource: the key holds no valid topology")
	// ErrBadID is a process id that is empty or holds a "/".
	ErrBadID = errors.New("shardcache/etcdsource: bad process id")
	// ErrBadCurrent is a Publish refused because the value at the key does
	// not parse (it wraps that ErrBadValue too): there is nothing to check
	// the change against, while every process checks it against the last
	// topology it received, and refuses what that check refuses. Publish
	// with OverwriteBadValue to write over it.
	ErrBadCurrent = errors.New("shardcache/etcdsource: the topology at the key does not parse, so the change cannot be checked against it")
)

// DefaultRetry is the pause before a watcher reads the key again after an
// error (the server unreachable, the watch cancelled).
const DefaultRetry = time.Second

// DefaultLeaseTTL is the lease of a registration when Register is given 0:
// a process cut off from etcd for longer leaves Status.
const DefaultLeaseTTL = 10 * time.Second

// Source is a topology.Source following one etcd key, and the operations
// on it: Get, Publish, Register, Status.
type Source struct {
	// Client is the etcd client; the Source does not close it.
	Client *clientv3.Client
	// Key holds the topology. Registrations live under Key + "/processes/".
	Key string
	// Retry is the pause after an error; 0 means DefaultRetry.
	Retry time.Duration
}

// processes is the prefix of the registrations.
func (s *Source) processes() string { return s.Key + "/processes/" }

// Get reads the topology at the key, its mod revision as Version, and
// checks it (topofile.Parse). An absent key is ErrNotFound.
func (s *Source) Get(ctx context.Context) (*topology.Topology, error) {
	resp, err := s.Client.Get(ctx, s.Key)
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", s.Key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, s.Key)
	}
	return s.decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// decode parses a value as the topology of revision rev.
func (s *Source) decode(value []byte, rev int64) (*topology.Topology, error) {
	t, err := topofile.Parse(value, topofile.JSON)
	if err != nil {
		return nil, fmt.Errorf("%w: %s revision %d: %w", ErrBadValue, s.Key, rev, err)
	}
	t.Version = rev
	return t, nil
}

// Watch implements topology.Source: the key's topology, then each new one
// as etcd reports it, each with its mod revision as Version. A value that
// does not parse, a deleted key and a lost connection are errors; the
// watcher reads the key again after Retry and goes on from there, so no
// revision is skipped silently (a compacted one is read as the current
// value). The watch requires a leader: a member cut off from its cluster
// is an error rather than a silent stall.
func (s *Source) Watch(ctx context.Context) <-chan topology.Update {
	ch := make(chan topology.Update)
	go s.watch(ctx, ch)
	return ch
}

func (s *Source) watch(ctx context.Context, ch chan<- topology.Update) {
	defer close(ch)
	retry := s.Retry
	if retry <= 0 {
		retry = DefaultRetry
	}
	send := func(u topology.Update) bool {
		select {
		case ch <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var sent int64 // the revision last sent
	for {
		if !s.follow(ctx, &sent, send) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// follow reads the key and watches it until an error, which it reports;
// it returns false when ctx is done.
func (s *Source) follow(ctx context.Context, sent *int64, send func(topology.Update) bool) bool {
	resp, err := s.Client.Get(ctx, s.Key)
	if err != nil {
		return ctx.Err() == nil && send(topology.Update{Err: fmt.Errorf("etcd get %s: %w", s.Key, err)})
	}
	rev := resp.Header.Revision
	switch {
	case len(resp.Kvs) == 0:
		if !send(topology.Update{Err: fmt.Errorf("%w: %s", ErrNotFound, s.Key)}) {
			return false
		}
	case resp.Kvs[0].ModRevision != *sent:
		kv := resp.Kvs[0]
		u := topology.Update{}
		if u.Topology, u.Err = s.decode(kv.Value, kv.ModRevision); u.Err == nil {
			*sent = kv.ModRevision
		}
		if !send(u) {
			return false
		}
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.Client.Watch(wctx, s.Key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return send(topology.Update{Err: fmt.Errorf("etcd watch %s: %w", s.Key, err)})
		}
		for _, ev := range wr.Events {
			u := topology.Update{}
			switch ev.Type {
			case clientv3.EventTypeDelete:
				u.Err = fmt.Errorf("%w: %s at revision %d", ErrDeleted, s.Key, ev.Kv.ModRevision)
			default:
				if u.Topology, u.Err = s.decode(ev.Kv.Value, ev.Kv.ModRevision); u.Err == nil {
					*sent = ev.Kv.ModRevision
				}
			}
			if !send(u) {
				return false
			}
		}
	}
	if ctx.Err() != nil {
		return false
	}
	return send(topology.Update{Err: fmt.Errorf("etcd watch %s: closed", s.Key)})
}

// PublishOption changes what one Publish does.
type PublishOption func(*publishOptions)

// publishOptions are a Publish's options.
type publishOptions struct {
	overwrite bool               // OverwriteBadValue given
	running   *topology.Topology // its topology, nil for none
}

// OverwriteBadValue lets Publish write over a value at the key that does
// not parse, which it otherwise refuses with ErrBadCurrent. The processes
// kept the last topology they received before that value, and check next
// against it: give it as running (a topology of the nodes they run, its
// migration if one is not over) so that Publish checks next against it
// too (topology.Validate) and does not write what they would refuse; nil
// checks next alone, as a first topology. A value that parses is still
// checked against, running aside.
func OverwriteBadValue(running *topology.Topology) PublishOption {
	return func(o *publishOptions) { o.overwrite, o.running = true, running }
}

// Publish writes next at the key if the key's mod revision is still
// expected (0: the key must not exist yet), and returns the new revision,
// next's Version for every watcher. Before writing it validates next
// against the topology it replaces (topology.Validate), so a publisher
// cannot write what the processes would refuse. A revision other than
// expected, before the write or at it, is ErrConflict. A value at the key
// that does not parse leaves nothing to validate against: Publish refuses
// it with ErrBadCurrent (which wraps its ErrBadValue), unless given
// OverwriteBadValue.
//
// It does not read the cache nodes: that a node the change adds holds no
// keys (a node added back still has its old values, which every process
// would read) is for the caller to check first, with the client's
// Client.CheckEmpty, as `shardcache topology publish` does.
func (s *Source) Publish(ctx context.Context, next *topology.Topology, expected int64, opts ...PublishOption) (int64, error) {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	resp, err := s.Client.Get(ctx, s.Key)
	if err != nil {
		return 0, fmt.Errorf("etcd get %s: %w", s.Key, err)
	}
	var prev *topology.Topology
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		if kv.ModRevision != expected {
			return 0, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, s.Key, kv.ModRevision, expected)
		}
		if prev, err = s.decode(kv.Value, kv.ModRevision); err != nil {
			// Written over unchecked, a change the processes refuse (one
			// that removes most of their nodes) would succeed here and
			// be refused by every one of them.
			if !o.overwrite {
				return 0, fmt.Errorf("%w (give OverwriteBadValue to write over it): %w", ErrBadCurrent, err)
			}
			prev = o.running
		}
	} else if expected != 0 {
		return 0, fmt.Errorf("%w: %s does not exist, expected revision %d", ErrConflict, s.Key, expected)
	}
	if err := topology.Validate(prev, next); err != nil {
		return 0, err
	}
	doc := next.Clone()
	doc.Version = 0 // the revision is the version
	value, err := topofile.Marshal(doc, topofile.JSON)
	if err != nil {
		return 0, err
	}
	txn, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.Key), "=", expected)).
		Then(clientv3.OpPut(s.Key, string(value))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd put %s: %w", s.Key, err)
	}
	if !txn.Succeeded {
		return 0, fmt.Errorf("%w: %s changed between the read and the write", ErrConflict, s.Key)
	}
	return txn.Header.Revision, nil
}

// Registration is a process's entry under the key's "processes/" prefix,
// holding the topology version it runs, under a lease kept alive until
// Close or until the process loses etcd for longer than the lease.
type Registration struct {
	session *concurrency.Session
	key     string
}

// Register records that process id runs version, under a lease of ttl
// (DefaultLeaseTTL when 0; etcd rounds it to whole seconds, and raises it
// to its minimum). The id must be unique in the fleet (a host name and a
// pid, a pod name) and holds no "/". The lease is kept alive while ctx
// lasts, or until Close.
func (s *Source) Register(ctx context.Context, id string, version int64, ttl time.Duration) (*Registration, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	sess, err := concurrency.NewSession(s.Client, concurrency.WithTTL(int((ttl+time.Second-1)/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("etcd lease for %s: %w", id, err)
	}
	r := &Registration{session: sess, key: s.processes() + id}
	if err := r.Set(ctx, version); err != nil {
		_ = sess.Close()
		return nil, err
	}
	return r, nil
}

// Set records that the process now runs version.
func (r *Registration) Set(ctx context.Context, version int64) error {
	_, err := r.session.Client().Put(ctx, r.key, strconv.FormatInt(version, 10), clientv3.WithLease(r.session.Lease()))
	if err != nil {
		return fmt.Errorf("etcd put %s: %w", r.key, err)
	}
	return nil
}

// Done is closed when the lease has expired or was revoked: the process
// is no longer counted, and must Register again.
func (r *Registration) Done() <-chan struct{} { return r.session.Done() }

// Close revokes the lease, which removes the entry at once.
func (r *Registration) Close() error { return r.session.Close() }

// Status is what the fleet runs: the key's version and each registered
// process's.
type Status struct {
	// Version is the key's mod revision, 0 when it holds no topology.
	Version int64
	// Processes are the registered processes' versions by id.
	Processes map[string]int64
	// Revision is etcd's revision when Status read them: watch from the
	// next one to follow the changes.
	Revision int64
}

// Status reads the key's revision and the registrations.
func (s *Source) Status(ctx context.Context) (Status, error) {
	resp, err := s.Client.Txn(ctx).Then(
		clientv3.OpGet(s.Key, clientv3.WithKeysOnly()),
		clientv3.OpGet(s.processes(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Status{}, fmt.Errorf("etcd get %s: %w", s.Key, err)
	}
	st := Status{Processes: map[string]int64{}, Revision: resp.Header.Revision}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		st.Version = kvs[0].ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		v, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			v = -1 // written by something else; shown as version -1
		}
		st.Processes[strings.TrimPrefix(string(kv.Key), s.processes())] = v
	}
	return st, nil
}

// Count returns how many processes run version.
func (st Status) Count(version int64) int {
	n := 0
	for _, v := range st.Processes {
		if v == version {
			n++
		}
	}
	return n
}

// String says, for instance, "12 processes on version 8, 1 still on 7":
// the processes on the key's version first, then the others from the
// newest version down.
func (st Status) String() string {
	counts := map[int64]int{}
	for _, v := range st.Processes {
		counts[v]++
	}
	plural := func(n int) string {
		if n == 1 {
			return "1 process"
		}
		return strconv.Itoa(n) + " processes"
	}
	parts := []string{fmt.Sprintf("%s on version %d", plural(counts[st.Version]), st.Version)}
	others := slices.SortedFunc(maps.Keys(counts), func(a, b int64) int { return cmp.Compare(b, a) })
	for _, v := range others {
		switch {
		case v == st.Version:
		case v < st.Version:
			parts = append(parts, fmt.Sprintf("%d still on %d", counts[v], v))
		default:
			parts = append(parts, fmt.Sprintf("%d on %d, newer than the key", counts[v], v))
		}
	}
	return strings.Join(parts, ", ")
}
