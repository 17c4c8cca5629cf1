package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// gomemcache speaks the classic text protocol only. What copies need beyond
// it, a key's remaining TTL (the meta command mg, memcached >= 1.6) and the
// list of keys a node holds (lru_crawler metadump, >= 1.4.31), goes over
// connections of the client's own, kept here.

// errNoMeta means the server does not know the meta commands.
var errNoMeta = errors.New("shardcache: memcached without meta commands")

// rawConns is a Memcached node's pool of raw connections.
type rawConns struct {
	addr    string
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout time.Duration // bounds each round trip, as gomemcache's Timeout
	// dialTimeout and writeTimeout, when set (Redis), bound the dial and
	// the writes, and timeout the reads, as go-redis's DialTimeout,
	// WriteTimeout and ReadTimeout; otherwise timeout bounds all three.
	dialTimeout, writeTimeout time.Duration

	maxIdle int
	noMeta  atomic.Bool // the server answered a meta command with ERROR

	noHashDump atomic.Bool // the server refused "lru_crawler metadump hash"

	h *nodeHealth // the node's health, told the outcome of every do (probe.go)

	// inUse counts the calls under way, from acquire or reserve to finish
	// or abandon; limit, when set, is the most reserve lets start.
	inUse atomic.Int64
	limit int

	// mc, beside a NewMemcacheClient, is the node's gomemcache client,
	// whose Timeout and MaxIdleConns the raw connections follow (see
	// knobs): compat/gomemcache sets them after New, as gomemcache's users
	// do.
	mc *memcache.Client

	mu     sync.Mutex
	idle   []*rawConn
	closed bool
}

// rawConn is one raw connection.
type rawConn struct {
	net.Conn
	r *bufio.Reader
	w *bufio.Writer
	// pooled: the connection has been idle in the pool, and the server may
	// have closed it meanwhile (a restart).
	pooled bool
	// late, while an answer is read after it was due (mcGets.recv), makes
	// each read that brings bytes push the read deadline lateGrace on, up
	// to lateEnd: the answer came late because the client read others
	// first, and its server, held by flow control meanwhile, is sending.
	late    atomic.Bool
	lateEnd time.Time
}

// lateReader reads rc's connection, pushing its deadline on while rc.late.
type lateReader struct{ rc *rawConn }

func (l lateReader) Read(b []byte) (int, error) {
	n, err := l.rc.Conn.Read(b)
	if n > 0 && l.rc.late.Load() {
		l.rc.Conn.SetReadDeadline(minTime(time.Now().Add(lateGrace), l.rc.lateEnd))
	}
	return n, err
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// newRawConns returns the raw connections of the node d dials: through d,
// the one place where the client connects to a node (TLS, login).
func newRawConns(o *Options, d *nodeDialer) *rawConns {
	return &rawConns{addr: d.node.Addr, dial: d.dial,
		timeout: max(o.ReadTimeout, o.WriteTimeout, o.DialTimeout), maxIdle: o.PoolSize}
}

// knobs returns the timeout of a round trip and the most idle connections
// to keep: the pool's own, or those of the node's gomemcache client with
// gomemcache's defaults.
func (p *rawConns) knobs() (timeout time.Duration, maxIdle int) {
	if p.mc == nil {
		return p.timeout, p.maxIdle
	}
	timeout, maxIdle = p.mc.Timeout, p.mc.MaxIdleConns
	if timeout == 0 {
		timeout = memcache.DefaultTimeout
	}
	if maxIdle <= 0 {
		maxIdle = memcache.DefaultMaxIdleConns
	}
	return timeout, maxIdle
}

// meta reports whether mg may be worth trying.
func (p *rawConns) meta() bool { return p != nil && !p.noMeta.Load() }

// do runs fn, a call of kind o, on a connection, bounded by ctx and by the
// pool's timeout. A connection fn failed on is closed; the others go back to
// the pool.
func (p *rawConns) do(ctx context.Context, o op, fn func(rc *rawConn) error) error {
	rc, err := p.begin(ctx, o)
	if err != nil {
		return err
	}
	return rc.end(fn(rc.rawConn))
}

// rawCall is a call under way on one raw connection, from begin to end.
type rawCall struct {
	*rawConn
	p     *rawConns
	ctx   context.Context
	o     op
	start time.Time
	stop  func() bool // the context's AfterFunc

	// noReuse: the connection is closed when the call ends, even after a
	// success (a deadline set by an AfterFunc may still land on it).
	noReuse bool
}

// begin takes a connection for a call of kind o and bounds it by ctx and by
// the pool's timeout; end gives it back. do is begin, one function, end.
func (p *rawConns) begin(ctx context.Context, o op) (rawCall, error) {
	p.inUse.Add(1)
	c, err := p.take(ctx, o)
	if err != nil {
		return c, err
	}
	c.SetDeadline(p.deadline(ctx))
	if ctx.Done() != nil {
		rc := c.rawConn
		c.stop = context.AfterFunc(ctx, func() { rc.SetDeadline(time.Unix(1, 0)) })
	}
	return c, nil
}

// take takes a connection for a call of kind o, without bounds: begin's
// first half, and the multi-get's (mcgets.go), which bounds its halves
// itself. The caller holds a place among the calls under way (begin's, or
// reserve's); a failure to get a connection gives it back, and is the
// call's outcome.
func (p *rawConns) take(ctx context.Context, o op) (rawCall, error) {
	start := p.h.begin()
	rc, err := p.get(ctx)
	if err != nil {
		p.inUse.Add(-1)
		p.h.observe(ctx, o, start, err)
		return rawCall{}, err
	}
	return rawCall{rawConn: rc, p: p, ctx: ctx, o: o, start: start}, nil
}

// reserve takes a place among the calls under way, for a multi-get
// (mcgets.go), unless limit are under way already: a Redis node's
// multi-get then goes through go-redis, whose pool waits for one of its
// PoolSize connections, so that a burst of callers does not open a
// connection each. The place is given back when the call ends.
func (p *rawConns) reserve() bool {
	if n := p.inUse.Add(1); p.limit > 0 && n > int64(p.limit) {
		p.inUse.Add(-1)
		return false
	}
	return true
}

// deadline is the end of a round trip starting now: the pool's timeout, or
// ctx's deadline if it comes first.
func (p *rawConns) deadline(ctx context.Context) time.Time {
	timeout, _ := p.knobs()
	return deadlineIn(ctx, timeout)
}

// deadlineIn is the end of a step of d starting now, or ctx's deadline if
// it comes first.
func deadlineIn(ctx context.Context, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	return deadline
}

// writeDeadline is deadline for a write: bounded by writeTimeout when set.
func (p *rawConns) writeDeadline(ctx context.Context) time.Time {
	if p.writeTimeout > 0 {
		return deadlineIn(ctx, p.writeTimeout)
	}
	return p.deadline(ctx)
}

// end ends the call with err, the outcome of its I/O, as finish does: err,
// or the context's error once ctx is done.
func (c rawCall) end(err error) error {
	if c.stop != nil && (!c.stop() || c.ctx.Err() != nil) {
		err = ctxErr(c.ctx, err)
	} else if err != nil {
		err, _ = pastDeadline(c.ctx, err)
	}
	return c.finish(err)
}

// finish closes a connection that failed and pools the others (a miss is
// an answer), and reports the call's outcome err to the node's health.
func (c rawCall) finish(err error) error {
	if (err != nil && err != ErrCacheMiss) || c.noReuse {
		c.rawConn.Close()
	} else {
		c.p.put(c.rawConn)
	}
	c.p.inUse.Add(-1) // once the connection is back: the next call takes it
	c.p.h.observe(c.ctx, c.o, c.start, err)
	return err
}

// abandon closes the call's connection and ends the call with no outcome:
// it is asked again on another (mcGets.recv).
func (c rawCall) abandon() {
	c.rawConn.Close()
	c.p.inUse.Add(-1)
}

// ctxErr returns ctx's error, wrapping err, once ctx is done.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		if err == nil {
			return cerr
		}
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

func (p *rawConns) get(ctx context.Context) (*rawConn, error) {
	if rc, err := p.getIdle(); rc != nil || err != nil {
		return rc, err
	}
	// Bounded as gomemcache bounds its dials: a hook's DialContext may
	// have no timeout of its own.
	timeout, _ := p.knobs()
	if p.dialTimeout > 0 {
		timeout = p.dialTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := p.dial(dctx, "tcp", p.addr)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	rc := &rawConn{Conn: conn, w: bufio.NewWriter(conn)}
	rc.r = bufio.NewReader(lateReader{rc})
	return rc, nil
}

func (p *rawConns) put(rc *rawConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, maxIdle := p.knobs(); p.closed || len(p.idle) >= maxIdle {
		rc.Close()
		return
	}
	rc.pooled = true
	p.idle = append(p.idle, rc)
}

// getIdle returns an idle connection of the pool; nil when there is none.
func (p *rawConns) getIdle() (*rawConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	n := len(p.idle)
	if n == 0 {
		return nil, nil
	}
	rc := p.idle[n-1]
	p.idle = p.idle[:n-1]
	return rc, nil
}

// Close closes the idle connections; those in use close when returned.
func (p *rawConns) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.closeIdle()
}

// closeIdle closes the idle connections, and the pool stays usable: when
// the node goes down, so that none outlives a restart of the server to
// fail a call (and count against the node) once it is back.
func (p *rawConns) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, rc := range idle {
		rc.Close()
	}
}

// line reads one line without its CR LF.
func (rc *rawConn) line() ([]byte, error) {
	l, err := rc.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(l, "\r\n"), nil
}

// metaGet reads each key's value, flags and remaining TTL in one round trip
// of pipelined "mg <key> v f t". It returns errNoMeta, and remembers it, when
// the server does not know mg.
func (p *rawConns) metaGet(ctx context.Context, keys []string) ([]item, error) {
	items := make([]item, len(keys))
	err := p.do(ctx, opGetMulti, func(rc *rawConn) error {
		for _, k := range keys {
			rc.w.WriteString("mg ")
			rc.w.WriteString(k)
			rc.w.WriteString(" v f t\r\n")
		}
		if err := rc.w.Flush(); err != nil {
			return err
		}
		for i, k := range keys {
			items[i].key = k
			if err := rc.readMeta(&items[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == errNoMeta {
		p.noMeta.Store(true)
	}
	if err == nil && p.h != nil {
		found := 0
		for _, it := range items {
			if it.found {
				found++
			}
		}
		p.h.stats.keys(opGetMulti, found, len(items)-found)
	}
	return items, err
}

// readMeta reads one answer to "mg <key> v f t" into it: "VA <size> f<flags>
// t<ttl>" and the value, or "EN" for a miss.
func (rc *rawConn) readMeta(it *item) error {
	l, err := rc.line()
	if err != nil {
		return err
	}
	f := bytes.Fields(l)
	switch {
	case len(f) == 1 && string(f[0]) == "EN":
		return nil
	case len(f) >= 2 && string(f[0]) == "VA":
	case len(f) >= 1 && string(f[0]) == "ERROR":
		return errNoMeta
	default:
		return fmt.Errorf("shardcache: memcached mg: unexpected answer %q", l)
	}
	size, err := strconv.Atoi(string(f[1]))
	if err != nil || size < 0 || size > maxValue {
		return fmt.Errorf("shardcache: memcached mg: bad size in %q", l)
	}
	it.found, it.ttlKnown = true, true
	for _, flag := range f[2:] {
		v, err := strconv.ParseInt(string(flag[1:]), 10, 64)
		if err != nil {
			return fmt.Errorf("shardcache: memcached mg: bad flag in %q", l)
		}
		switch flag[0] {
		case 'f':
			it.flags = uint32(v)
		case 't':
			switch {
			case v < 0: // -1: no expiry
			case v == 0: // expires within the second
				it.ttl = time.Millisecond
			default:
				it.ttl = time.Duration(v) * time.Second
			}
		}
	}
	it.value = make([]byte, size+2)
	if _, err := io.ReadFull(rc.r, it.value); err != nil {
		return err
	}
	it.value = it.value[:size]
	return nil
}

// listedKey is a key of a metadump, with its absolute expiry.
type listedKey struct {
	key string
	exp int64 // Unix seconds; -1: no expiry
}

// errBusy is a metadump refused because another crawl is running.
var errBusy = errors.New("shardcache: memcached crawler busy")

// metadump lists every key of the node with its expiry, read to the end at
// once so the node's crawler is held no longer than the listing takes: one
// crawl at a time per node, and another process's sweep waits for it. While
// another crawl runs it retries, up to ctx and a bound on attempts.
//
// It walks the hash table ("metadump hash", memcached >= 1.6): a walk of the
// LRUs ("metadump all", the fallback for older servers) misses keys that
// reads move from one LRU segment to another while it runs.
func (p *rawConns) metadump(ctx context.Context) ([]listedKey, error) {
	for attempt := 0; ; attempt++ {
		keys, err := p.metadumpOnce(ctx, !p.noHashDump.Load())
		if errors.Is(err, ErrSweepUnsupported) && !p.noHashDump.Load() {
			p.noHashDump.Store(true)
			continue
		}
		if err != errBusy || attempt == 600 {
			return keys, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (p *rawConns) metadumpOnce(ctx context.Context, hash bool) ([]listedKey, error) {
	conn, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	rc := &rawConn{Conn: conn, r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriter(conn)}
	timeout, _ := p.knobs()
	conn.SetDeadline(time.Now().Add(timeout))
	if hash {
		rc.w.WriteString("lru_crawler metadump hash\r\n")
	} else {
		rc.w.WriteString("lru_crawler metadump all\r\n")
	}
	if err := rc.w.Flush(); err != nil {
		return nil, ctxErr(ctx, err)
	}
	var keys []listedKey
	for n := 0; ; n++ {
		if n%1024 == 0 { // a long listing: each stretch of it gets the timeout
			conn.SetDeadline(time.Now().Add(timeout))
		}
		l, err := rc.line()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		switch {
		case string(l) == "END":
			return keys, nil
		case bytes.HasPrefix(l, []byte("BUSY")):
			return nil, errBusy
		case !bytes.HasPrefix(l, []byte("key=")):
			return nil, fmt.Errorf("%w: lru_crawler metadump: %q", ErrSweepUnsupported, l)
		}
		k, err := parseMetadump(l)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
}

// parseMetadump parses "key=<uri-encoded key> exp=<unix|-1> la=... ...".
func parseMetadump(l []byte) (listedKey, error) {
	var k listedKey
	var gotKey, gotExp bool
	for _, f := range bytes.Fields(l) {
		switch {
		case bytes.HasPrefix(f, []byte("key=")):
			key, err := url.PathUnescape(string(f[4:]))
			if err != nil {
				return k, fmt.Errorf("shardcache: lru_crawler metadump: bad key in %q: %w", l, err)
			}
			k.key, gotKey = key, true
		case bytes.HasPrefix(f, []byte("exp=")):
			exp, err := strconv.ParseInt(string(f[4:]), 10, 64)
			if err != nil {
				return k, fmt.Errorf("shardcache: lru_crawler metadump: bad exp in %q", l)
			}
			k.exp, gotExp = exp, true
		}
	}
	if !gotKey || !gotExp {
		return k, fmt.Errorf("shardcache: lru_crawler metadump: no key or exp in %q", l)
	}
	return k, nil
}

// addMulti adds each item if its key is absent, with its flags and TTL, in
// one round trip of pipelined "add" commands, and reports which were stored.
// When the server refuses some (SERVER_ERROR: too large, out of memory) it
// returns both what it stored and the first refusal.
func (p *rawConns) addMulti(ctx context.Context, items []item) ([]bool, error) {
	stored := make([]bool, len(items))
	err := p.do(ctx, opAddMulti, func(rc *rawConn) error {
		var num []byte
		for _, it := range items {
			num = num[:0]
			num = append(num, "add "...)
			num = append(num, it.key...)
			num = append(num, ' ')
			num = strconv.AppendUint(num, uint64(it.flags), 10)
			num = append(num, ' ')
			num = strconv.AppendInt(num, int64(mcExpiration(it.ttl)), 10)
			num = append(num, ' ')
			num = strconv.AppendInt(num, int64(len(it.value)), 10)
			num = append(num, "\r\n"...)
			rc.w.Write(num)
			rc.w.Write(it.value)
			rc.w.WriteString("\r\n")
		}
		if err := rc.w.Flush(); err != nil {
			return err
		}
		var refused error
		for i := range items {
			l, err := rc.line()
			if err != nil {
				return err
			}
			switch {
			case string(l) == "STORED":
				stored[i] = true
			case string(l) == "NOT_STORED":
			case bytes.HasPrefix(l, []byte("SERVER_ERROR")): // this item alone
				if refused == nil {
					refused = fmt.Errorf("shardcache: memcached add %q: %s", items[i].key, l)
				}
			default: // the stream can no longer be trusted
				return fmt.Errorf("shardcache: memcached add %q: %s", items[i].key, l)
			}
		}
		return refused
	})
	if err != nil && !slices.Contains(stored, true) {
		return nil, err
	}
	return stored, err
}
