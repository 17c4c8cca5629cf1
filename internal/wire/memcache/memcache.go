// Package memcache is the memcached protocol the client speaks, over one
// bounded pool of connections per server (internal/wire): the classic
// text commands (retrieval with gets and gats, the six storage commands,
// pipelined multi-stores and multi-deletes, incr and decr, touch, delete,
// flush_all, version, stats), the meta commands (mg, ms, md, ma, mn) with
// a general flag encoder and decoder, a streaming lru_crawler metadump,
// and ASCII authentication (memcached -Y). Standard library only.
//
// A Client is one server's. Every call takes a connection of its pool
// (waiting while all Size are busy), is bounded by the caller's context
// and the pool's timeouts, and gives the connection back when the answer
// left the stream in step: a miss, a refused condition or a server's error
// line do; an I/O or a parse error closes it. The typed errors (ErrCacheMiss,
// ErrNotStored, ErrValueTooLarge, ...) work with errors.Is.
//
// Values are checked against the server's item limit before any I/O:
// memcached counts the item's header (about 60 bytes and the key) in its
// item_size_max, which the client learns once, lazily, from "stats
// settings" (see MaxValueFor).
//
//	c := memcache.New(memcache.Config{Config: wire.Config{Addr: "10.0.0.1:11211", Size: 8}})
//	defer c.Close()
//	err := c.Store(ctx, memcache.Set, memcache.Item{Key: "k", Value: []byte("v")})
//	it, err := c.Get(ctx, "k") // memcache.ErrCacheMiss on a miss
package memcache

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/shardcache/shardcache/internal/wire"
)

// Config configures a Client.
type Config struct {
	// Config is the pool's: Addr, Size, the timeouts, a shared Budget.
	// When its Dial is nil, the client dials with a wire.Dialer of TLS and
	// the login below; a Dial of the caller's replaces both.
	wire.Config
	// TLS, when set, makes every connection TLS (ServerName defaults to
	// Addr's host).
	TLS *tls.Config
	// Username and Password, when Username is set, log each new
	// connection in (memcached -Y, see Login).
	Username, Password string
	// MaxValueSize, when positive, is the longest value the client sends,
	// instead of the limit it learns from the server: for a proxy, whose
	// own limit the client cannot read.
	MaxValueSize int
}

// Meta support, as found: unknown until the server answers a meta command.
const (
	metaUnknown int32 = iota
	metaYes
	metaNo
)

// Client is one memcached server's client. It is safe for concurrent use.
type Client struct {
	pool *wire.Pool
	cfg  Config

	meta       atomic.Int32  // metaUnknown, metaYes or metaNo
	noHashDump atomic.Bool   // the server refused "lru_crawler metadump hash"
	expandFor  time.Duration // tests: Metadump's wait for an expansion; 0: expandBudget
	limits     limits        // the server's item limit, learned lazily (stats.go)
	// window is the most requests of a pipeline sent before their replies
	// are read: no bound (the whole pipeline at once) in plain TCP;
	// tlsWindow over TLS. memcached serves at most reqs_per_event (-R, 20
	// by default) requests of a connection per event, then waits for the
	// socket to be readable again: over TLS the rest of the pipeline is
	// already in OpenSSL's buffer, the socket never becomes readable, and
	// the pipeline stalls until the client's read times out.
	window int
}

// tlsWindow is a pipeline's window over TLS, under memcached's default
// reqs_per_event.
const tlsWindow = 16

// New returns a client of the server at cfg.Addr. It dials nothing yet:
// connections are made on first use, and a bad TLS setting fails them.
func New(cfg Config) *Client {
	if cfg.Dial == nil {
		d := &wire.Dialer{Addr: cfg.Addr, Timeout: cfg.DialTimeout}
		tlsCfg, tlsErr := wire.NewTLSConfig(cfg.TLS, cfg.Addr)
		d.TLS = tlsCfg
		if cfg.Username != "" {
			d.Login = Login(cfg.Username, cfg.Password)
		}
		cfg.Dial = d.Dial
		if tlsErr != nil {
			cfg.Dial = func(context.Context, string, string) (net.Conn, error) { return nil, tlsErr }
		}
	}
	c := &Client{cfg: cfg, window: 1 << 30}
	if cfg.TLS != nil {
		c.window = tlsWindow
	}
	c.pool = wire.NewPool(cfg.Config)
	c.cfg.Config = c.pool.Config()
	c.limits.init()
	return c
}

// Pool returns the client's pool.
func (c *Client) Pool() *wire.Pool { return c.pool }

// Addr returns the server's address.
func (c *Client) Addr() string { return c.cfg.Addr }

// Close closes every connection, those of calls in flight included, which
// then fail; later calls fail with wire.ErrClosed.
func (c *Client) Close() error { return c.pool.Close() }

// CloseIdle closes the idle connections; the client stays usable.
func (c *Client) CloseIdle() { c.pool.CloseIdle() }

// Item is an item going to or coming from the server.
type Item struct {
	Key   string
	Value []byte
	Flags uint32
	// Exptime is a store's expiration field: 0 for none, seconds up to 30
	// days, a Unix time beyond (see Expiration).
	Exptime int32
	// CAS is the item's CAS id: set by gets, sent by the CAS store.
	CAS uint64
}

// inStep reports whether the stream is still in step after err, the
// outcome of a command (with data: a storage command, its data block
// sent): the connection may be reused.
func inStep(err error, data bool) bool {
	switch err {
	case nil, ErrCacheMiss, ErrNotStored, ErrCASConflict:
		return true
	}
	se, ok := err.(*ServerError)
	if !ok {
		return false
	}
	switch {
	case se.is == ErrAuth:
		return false // the server closes an unauthenticated connection
	case data && se.Kind != "SERVER_ERROR":
		// memcached swallows the data block of a refused store after a
		// SERVER_ERROR; after ERROR or some CLIENT_ERRORs it reads it as
		// a command.
		return false
	}
	return true
}

// end ends call with err, reusing the connection when inStep.
func end(call *wire.Call, err error, data bool) error {
	return call.End(err, inStep(err, data))
}
