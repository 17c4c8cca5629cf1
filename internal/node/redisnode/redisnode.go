// Package redisnode is a cache node served by Redis: node.Node and its
// capabilities over one go-redis client per node, whose pool holds the
// node's connections and whose hooks see every command the client sends.
//
// Every command goes through the node's go-redis client, with one
// exception: while nobody outside the package has been handed that client
// (Node.Redis) and no NewClient hook made it, a multi-get's MGET goes over
// connections of the package's own, in two halves (package wire: every
// node's request written before any answer is read, on the caller's
// goroutine), because go-redis cannot write one command before it reads
// another's answer and a goroutine per node costs a fifth more than the
// whole multi-get otherwise. Those connections take their places in the
// same budget as go-redis's pool (wire.Budget), so the node sees at most
// PoolSize connections from the client in all; when go-redis holds every
// place, the MGET goes through go-redis. Once the go-redis client has been
// handed out, a hook may have been added to it, so from then on the MGETs
// go through it too, and the hook sees them.
//
//	n, err := redisnode.New(redisnode.Config{Addr: "10.0.0.1:6379", PoolSize: 8, Observer: obs})
//	if err != nil { ... }
//	defer n.Close()
//	v, err := n.Get(ctx, "user:42") // node.ErrCacheMiss on a miss
package redisnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/wire"
	"github.com/shardcache/shardcache/internal/wire/resp"
)

// Config configures a node.
type Config struct {
	Addr string
	// Username, Password and DB log in to the node: an ACL user (empty:
	// "default") or requirepass, and the database to SELECT.
	Username, Password string
	DB                 int
	// TLS, when set, makes every connection TLS; ServerName defaults to
	// the host of Addr.
	TLS *tls.Config
	// PoolSize is the most connections to the node at once, go-redis's and
	// the multi-gets' together. Default wire.DefaultSize.
	PoolSize int
	// MaxIdle is the most idle connections kept. Default PoolSize.
	MaxIdle int
	// DialTimeout, ReadTimeout and WriteTimeout bound each network step,
	// as go-redis's fields of the same names. Default wire.DefaultTimeout.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// NewClient, when set, makes the node's go-redis client from the
	// options the package would use (go-redis's RingOptions.NewClient):
	// every command then goes through the client it makes.
	NewClient func(opt *redis.Options) *redis.Client
	// Release, when set, is called in place of Close on the client
	// NewClient made when the node closes: its maker shares it.
	Release func(*redis.Client)
	// AutoPipeline sends single-key commands through go-redis's
	// auto-pipeliner on the node's own client while other calls to the
	// node are under way (see package doc of client, Options.AutoPipeline).
	AutoPipeline bool
	// NearCache, when set, has go-redis's client-side caching on the node's
	// client (RESP3 CLIENT TRACKING) fill NearCache.Store with the node's
	// GETs and keep it current (nearcache.go).
	NearCache *NearCache
	// Observer is told every call's outcome. Default node.Discard.
	Observer node.Observer
}

// Node is a Redis node.
type Node struct {
	addr string
	rdb  *redis.Client
	obs  node.Observer
	ap   *autoPipe  // nil without AutoPipeline
	near *nearCache // nil without NearCache
	// raw is the pool of the multi-gets' own connections, nil when a
	// NewClient hook made rdb; exposed is set once rdb has been handed
	// out (Redis), after which they are not used.
	raw     *wire.Pool
	exposed atomic.Bool
	release func(*redis.Client) // Config.Release: rdb is not the node's to close
}

var (
	_ node.Node        = (*Node)(nil)
	_ node.Items       = (*Node)(nil)
	_ node.Sweeper     = (*Node)(nil)
	_ node.Leaser      = (*Node)(nil)
	_ node.LeaseReader = (*Node)(nil)
	_ node.IdleCloser  = (*Node)(nil)
)

// New makes the node's clients; it dials nothing.
func New(cfg Config) (*Node, error) {
	if cfg.Observer == nil {
		cfg.Observer = node.Discard
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = wire.DefaultSize
	}
	if cfg.MaxIdle <= 0 || cfg.MaxIdle > cfg.PoolSize {
		cfg.MaxIdle = cfg.PoolSize
	}
	for _, t := range []*time.Duration{&cfg.DialTimeout, &cfg.ReadTimeout, &cfg.WriteTimeout} {
		if *t <= 0 {
			*t = wire.DefaultTimeout
		}
	}
	tlsCfg, err := wire.NewTLSConfig(cfg.TLS, cfg.Addr)
	if err != nil {
		return nil, err
	}
	n := &Node{addr: cfg.Addr, obs: cfg.Observer}
	d := &wire.Dialer{Addr: cfg.Addr, Timeout: cfg.DialTimeout, TLS: tlsCfg}
	budget := wire.NewBudget(cfg.PoolSize)
	opt := &redis.Options{
		Addr:                  cfg.Addr,
		Dialer:                quietDial(budget.Dial(d.Dial)), // TCP and TLS, in the node's budget; go-redis logs in itself
		TLSConfig:             tlsCfg,                         // not dialed with (Dialer is): tells go-redis TLS is on
		Username:              cfg.Username,
		Password:              cfg.Password,
		DB:                    cfg.DB,
		DialTimeout:           cfg.DialTimeout,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		PoolSize:              cfg.PoolSize,
		MaxIdleConns:          cfg.MaxIdle,
		ContextTimeoutEnabled: true,
		// Pipelines (and the auto-pipeliner) on the main pool: go-redis's
		// dedicated pipeline pool would add up to 10 connections beside
		// PoolSize.
		PipelinePoolSize: -1,
		// One attempt per dial: go-redis's default of 5, 100ms apart, on top
		// of its command retries, made a refused node cost 1.7s per call.
		DialerRetries: 1,
		// No command retries: a retried INCRBY after a read timeout would
		// count twice, and for a cache a fast miss beats a slow retry.
		MaxRetries: -1,
	}
	if n.near, err = cfg.NearCache.forNode(cfg.Addr, opt); err != nil {
		return nil, err
	}
	if cfg.NewClient != nil {
		n.rdb, n.release = cfg.NewClient(opt), cfg.Release
		n.exposed.Store(true)
	} else {
		n.rdb = redis.NewClient(opt)
		n.raw = wire.NewPool(wire.Config{
			Addr: cfg.Addr,
			Dial: (&wire.Dialer{Addr: cfg.Addr, Timeout: cfg.DialTimeout, TLS: tlsCfg,
				Login: resp.Login(resp.Credentials{Username: cfg.Username, Password: cfg.Password, DB: cfg.DB})}).Dial,
			Size: cfg.PoolSize, MaxIdle: cfg.MaxIdle, DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
			Budget: budget,
		})
	}
	if err := n.near.attached(cfg.Addr, n.rdb); err != nil {
		n.Close()
		return nil, err
	}
	n.rdb.AddHook(newHook(n.obs, n.near))
	if cfg.Password != "" {
		n.rdb.AddHook(redactHook{cfg.Password})
	}
	if cfg.AutoPipeline {
		ap, err := n.rdb.AsyncAutoPipeline()
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("auto-pipeline of %s: %w", cfg.Addr, err)
		}
		n.ap = &autoPipe{ap: ap, obs: n.obs}
	}
	return n, nil
}

// Redis returns the node's go-redis client, for commands the node does not
// wrap. From then on every command of the node goes through it, so that a
// hook added to it sees them all.
func (n *Node) Redis() *redis.Client {
	n.exposed.Store(true)
	return n.rdb
}

// Client returns the node's go-redis client without handing it out: for
// the package client's own commands on it (RedisDo), which its hooks see.
func (n *Node) Client() *redis.Client { return n.rdb }

// Options returns the options of the node's go-redis client.
func (n *Node) Options() *redis.Options { return n.rdb.Options() }

// ttl converts a TTL for go-redis: 0 stays "no expiry", and a TTL under a
// millisecond becomes one, the smallest Redis accepts.
func ttl(d time.Duration) time.Duration {
	if d > 0 && d < time.Millisecond {
		return time.Millisecond
	}
	return d
}

// mapErr maps go-redis errors: redis.Nil is a miss, go-redis's closed
// client node.ErrClosed, a refused login or command node.ErrAuth or
// node.ErrNoPerm, and a network timeout caused by the context's deadline
// says so (go-redis returns the bare timeout when it does not retry).
func mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case err == redis.Nil:
		return node.ErrCacheMiss
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("%w: %w", node.ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err, ok := wire.PastDeadline(ctx, err); ok {
		return err
	}
	return authErr(err)
}

// authErr marks a refusal of the client's credentials or a TLS failure
// with node.ErrAuth, an ACL refusal with node.ErrNoPerm: go-redis's
// replies, and those the multi-gets' own connections read (resp.Error).
func authErr(err error) error {
	var re resp.Error
	own := errors.As(err, &re)
	switch {
	case errors.Is(err, node.ErrAuth) || errors.Is(err, node.ErrNoPerm):
		return err
	case redis.IsPermissionError(err) || own && strings.HasPrefix(string(re), "NOPERM"):
		return fmt.Errorf("%w: %w", node.ErrNoPerm, err)
	case redis.IsAuthError(err) || errors.Is(err, resp.ErrLogin):
		return fmt.Errorf("%w: %w", node.ErrAuth, err)
	case errors.As(err, new(*redactedError)):
		// Only the login (HELLO, AUTH) carries the password: a reply that
		// quotes it refused the login.
		return fmt.Errorf("%w: login refused: %w", node.ErrAuth, err)
	case wire.TLSFailure(err):
		return fmt.Errorf("%w: %w", node.ErrAuth, err)
	}
	return err
}

// bytesOf returns the bytes of a reply string without copying them, as
// go-redis's own StringCmd.Bytes does: each reply string is freshly
// allocated and referenced nowhere else, so nothing can see it change.
func bytesOf(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// fromPTTL converts a PTTL reply to a TTL to copy (0: no expiry); ok is
// false when the key is missing, or expired since the read of its value.
func fromPTTL(pttl time.Duration) (time.Duration, bool) {
	switch {
	case pttl == -2:
		return 0, false
	case pttl == -1:
		return 0, true
	case pttl <= 0:
		return time.Millisecond, true
	}
	return pttl, true
}

// withOp marks ctx for the hook: the pipeline sent under it is one call of
// kind op (hook.go).
func withOp(ctx context.Context, op node.Op) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

type opKey struct{}

// Get reads key with GET, through the auto-pipeliner where there is one
// and no near cache. A miss is node.ErrCacheMiss.
func (n *Node) Get(ctx context.Context, key string) ([]byte, error) {
	if n.ap != nil && n.near == nil {
		return n.ap.get(ctx, n.rdb, key)
	}
	v, err := n.rdb.Get(live(ctx), key).Bytes()
	return v, mapErr(ctx, err)
}

// GetMulti reads keys, one Item each in order (Found false for a miss):
// without withTTL as the MGET of Send, with it as GET and PTTL of each key
// in one pipeline, which the near cache neither answers nor fills.
func (n *Node) GetMulti(ctx context.Context, keys []string, withTTL bool) ([]node.Item, error) {
	items := make([]node.Item, len(keys))
	if !withTTL {
		out := make([]node.Answer, len(keys))
		if err := n.Send(ctx, keys).Recv(out); err != nil {
			return nil, err
		}
		for i := range out {
			items[i] = node.AnswerItem(keys[i], &out[i])
		}
		return items, nil
	}
	// GET and PTTL of every key in one round trip; a pipeline, which the
	// near cache neither answers nor fills.
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	ctx = withOp(ctx, node.OpGetMulti)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i], ttls[i] = p.Get(ctx, k), p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, mapErr(ctx, err)
	}
	for i, k := range keys {
		items[i].Key = k
		v, err := gets[i].Bytes()
		t, ok := fromPTTL(ttls[i].Val())
		if err != nil || !ok {
			continue
		}
		items[i].Value, items[i].Found, items[i].TTL, items[i].TTLKnown = v, true, t, true
	}
	return items, nil
}

// Set writes key with SET, expiring after d (0: never), through the
// auto-pipeliner where there is one.
func (n *Node) Set(ctx context.Context, key string, value []byte, d time.Duration) error {
	if n.ap != nil {
		return n.ap.set(ctx, n.rdb, key, value, d)
	}
	return mapErr(ctx, n.rdb.Set(live(ctx), key, value, ttl(d)).Err())
}

// SetMulti writes each item with SET, in one pipeline.
func (n *Node) SetMulti(ctx context.Context, items []node.Item) error {
	ctx = withOp(ctx, node.OpSetMulti)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, it := range items {
			p.Set(ctx, it.Key, it.Value, ttl(it.TTL))
		}
		return nil
	})
	return mapErr(ctx, err)
}

// Add writes key with SET NX, through the auto-pipeliner where there is
// one; a key already present is node.ErrNotStored.
func (n *Node) Add(ctx context.Context, key string, value []byte, d time.Duration) error {
	if n.ap != nil {
		return n.ap.add(ctx, n.rdb, key, value, d)
	}
	ok, err := n.rdb.SetNX(live(ctx), key, value, ttl(d)).Result()
	if err == nil && !ok {
		return node.ErrNotStored
	}
	return mapErr(ctx, err)
}

// Delete deletes key with DEL, through the auto-pipeliner where there is
// one; a missing key is no error.
func (n *Node) Delete(ctx context.Context, key string) error {
	if n.ap != nil {
		return n.ap.delete(ctx, n.rdb, key)
	}
	return mapErr(ctx, n.rdb.Del(live(ctx), key).Err())
}

// DeleteMulti deletes keys with one DEL; missing keys are no error.
func (n *Node) DeleteMulti(ctx context.Context, keys []string) error {
	return mapErr(ctx, n.rdb.Del(live(ctx), keys...).Err())
}

// Incr is INCRBY: a missing key is created with the value delta and no
// expiry.
func (n *Node) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	if n.ap != nil {
		return n.ap.incr(ctx, n.rdb, key, delta)
	}
	v, err := n.rdb.IncrBy(live(ctx), key, delta).Result()
	return v, mapErr(ctx, err)
}

// Touch sets key's expiry to d with PEXPIRE or, for d of 0 or less,
// removes it with PERSIST and EXISTS in one pipeline. A missing key is
// node.ErrCacheMiss.
func (n *Node) Touch(ctx context.Context, key string, d time.Duration) error {
	if d > 0 && n.ap != nil {
		return n.ap.expire(ctx, n.rdb, key, d)
	}
	if d > 0 {
		ok, err := n.rdb.PExpire(live(ctx), key, ttl(d)).Result()
		if err == nil && !ok {
			return node.ErrCacheMiss
		}
		return mapErr(ctx, err)
	}
	// PERSIST answers 0 both for a missing key and for one without expiry.
	var exists *redis.IntCmd
	ctx = withOp(ctx, node.OpTouch)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Persist(ctx, key)
		exists = p.Exists(ctx, key)
		return nil
	})
	if err == nil && exists.Val() == 0 {
		return node.ErrCacheMiss
	}
	return mapErr(ctx, err)
}

// Ping sends PING.
func (n *Node) Ping(ctx context.Context) error {
	return mapErr(ctx, n.rdb.Ping(live(ctx)).Err())
}

// CloseIdle closes the multi-gets' idle connections; go-redis checks its
// own when it takes them from its pool.
func (n *Node) CloseIdle() {
	if n.raw != nil {
		n.raw.CloseIdle()
	}
}

// Close closes the auto-pipeliner, the go-redis client (which ends a
// probe in flight on a node that does not answer), or hands it to
// Config.Release, and the multi-gets' connections.
func (n *Node) Close() error {
	var apErr error
	if n.ap != nil {
		apErr = n.ap.Close()
	}
	var err error
	if n.release != nil {
		n.release(n.rdb)
	} else {
		err = n.rdb.Close()
	}
	if n.raw != nil {
		n.raw.Close()
	}
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return apErr
}

// quietDial returns dial, whose failures come back as a connection that
// fails every read and write with the dial's error. go-redis prints every
// failed dial ("connection pool: failed to dial after 1 attempts") through
// a logger global to the process, with no setting per client; a node that
// is down would fill the application's stderr with them, although each
// failure reaches the caller as an error and the node's health. Given a
// connection, go-redis logs nothing: its handshake's first write fails
// with the dial's own error, which the command returns, and the connection
// is dropped. The application's other go-redis clients log as before.
func quietDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return deadConn{dialError{err}}, nil
		}
		return conn, nil
	}
}

// dialError is the failure of a dial, which a deadConn returns.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// deadConn is a dial that failed with err.
type deadConn struct{ err error }

func (c deadConn) Read([]byte) (int, error)       { return 0, c.err }
func (c deadConn) Write([]byte) (int, error)      { return 0, c.err }
func (deadConn) Close() error                     { return nil }
func (deadConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (deadConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (deadConn) SetDeadline(time.Time) error      { return nil }
func (deadConn) SetReadDeadline(time.Time) error  { return nil }
func (deadConn) SetWriteDeadline(time.Time) error { return nil }

// unsupported is node.ErrUnsupported for what.
func unsupported(what string) error {
	return fmt.Errorf("%w: %s on Redis", node.ErrUnsupported, what)
}

// globEscape escapes the characters SCAN MATCH reads as a pattern.
var globEscape = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
