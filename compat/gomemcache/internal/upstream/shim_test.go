package memcache

// What gomemcache's tests call of their own package, supplied by the
// drop-in: how a client is made is all that changes. Item and the errors
// are gomemcache's, which the drop-in takes and returns; Client is a
// *gomemcache.Client, each call announced to a hook first so that a test
// can reshard between two calls of the suite.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strings"

	gm "github.com/bradfitz/gomemcache/memcache"

	"github.com/shardcache/shardcache/compat/gomemcache"
	"github.com/shardcache/shardcache/internal/testserver"
	"github.com/shardcache/shardcache/internal/wire"
	wirememcache "github.com/shardcache/shardcache/internal/wire/memcache"
	"github.com/shardcache/shardcache/ring"
)

// Item is gomemcache's: the drop-in takes and returns it.
type Item = gm.Item

// gomemcache's sentinels, the very values: the suite compares with ==.
var (
	ErrCacheMiss    = gm.ErrCacheMiss
	ErrCASConflict  = gm.ErrCASConflict
	ErrNotStored    = gm.ErrNotStored
	ErrMalformedKey = gm.ErrMalformedKey
)

// Client is the drop-in under the suite.
type Client struct {
	mc *gomemcache.Client
	// DialContext is there for TestTLS to compile: the drop-in has no
	// dialer of the caller's (TLS is gomemcache.Options.TLSConfig), and a
	// client given one refuses every call rather than dial without it.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// before, when set, is called before each call with the method's name
	// and the keys it is given.
	before func(method string, keys ...string)
}

// errDialContext is every call's error once DialContext is set.
var errDialContext = errors.New("upstream: the drop-in has no DialContext; TLS is gomemcache.Options.TLSConfig")

// New returns the drop-in over servers, each a node named by its address,
// with testserver.ClientTimeout: the suite is not about timeouts, and
// gomemcache's default (500 ms) is one a busy machine reaches.
func New(server ...string) *Client {
	nodes := make([]ring.Node, len(server))
	for i, s := range server {
		nodes[i] = ring.Node{Addr: s}
	}
	mc, err := gomemcache.New(nodes)
	if err != nil {
		panic("upstream: New(" + strings.Join(server, ", ") + "): " + err.Error())
	}
	return wrap(mc)
}

// wrap makes mc the client under the suite.
func wrap(mc *gomemcache.Client) *Client {
	mc.Timeout = testserver.ClientTimeout
	return &Client{mc: mc}
}

// call announces a call; its error, when the client cannot make it.
func (c *Client) call(method string, keys ...string) error {
	if c.before != nil {
		c.before(method, keys...)
	}
	if c.DialContext != nil {
		return errDialContext
	}
	return nil
}

// Get is the drop-in's Get.
func (c *Client) Get(key string) (*Item, error) {
	if err := c.call("Get", key); err != nil {
		return nil, err
	}
	return c.mc.Get(key)
}

// GetMulti is the drop-in's GetMulti.
func (c *Client) GetMulti(keys []string) (map[string]*Item, error) {
	if err := c.call("GetMulti", keys...); err != nil {
		return nil, err
	}
	return c.mc.GetMulti(keys)
}

// Set is the drop-in's Set.
func (c *Client) Set(item *Item) error {
	if err := c.call("Set", item.Key); err != nil {
		return err
	}
	return c.mc.Set(item)
}

// Add is the drop-in's Add.
func (c *Client) Add(item *Item) error {
	if err := c.call("Add", item.Key); err != nil {
		return err
	}
	return c.mc.Add(item)
}

// Replace is the drop-in's Replace.
func (c *Client) Replace(item *Item) error {
	if err := c.call("Replace", item.Key); err != nil {
		return err
	}
	return c.mc.Replace(item)
}

// Append is the drop-in's Append.
func (c *Client) Append(item *Item) error {
	if err := c.call("Append", item.Key); err != nil {
		return err
	}
	return c.mc.Append(item)
}

// Prepend is the drop-in's Prepend.
func (c *Client) Prepend(item *Item) error {
	if err := c.call("Prepend", item.Key); err != nil {
		return err
	}
	return c.mc.Prepend(item)
}

// CompareAndSwap is the drop-in's CompareAndSwap.
func (c *Client) CompareAndSwap(item *Item) error {
	if err := c.call("CompareAndSwap", item.Key); err != nil {
		return err
	}
	return c.mc.CompareAndSwap(item)
}

// Delete is the drop-in's Delete.
func (c *Client) Delete(key string) error {
	if err := c.call("Delete", key); err != nil {
		return err
	}
	return c.mc.Delete(key)
}

// DeleteAll is the drop-in's DeleteAll.
func (c *Client) DeleteAll() error {
	if err := c.call("DeleteAll"); err != nil {
		return err
	}
	return c.mc.DeleteAll()
}

// FlushAll is the drop-in's FlushAll.
func (c *Client) FlushAll() error {
	if err := c.call("FlushAll"); err != nil {
		return err
	}
	return c.mc.FlushAll()
}

// Increment is the drop-in's Increment.
func (c *Client) Increment(key string, delta uint64) (uint64, error) {
	if err := c.call("Increment", key); err != nil {
		return 0, err
	}
	return c.mc.Increment(key, delta)
}

// Decrement is the drop-in's Decrement.
func (c *Client) Decrement(key string, delta uint64) (uint64, error) {
	if err := c.call("Decrement", key); err != nil {
		return 0, err
	}
	return c.mc.Decrement(key, delta)
}

// Touch is the drop-in's Touch.
func (c *Client) Touch(key string, seconds int32) error {
	if err := c.call("Touch", key); err != nil {
		return err
	}
	return c.mc.Touch(key, seconds)
}

// GetAndTouch is the drop-in's GetAndTouch.
func (c *Client) GetAndTouch(key string, expiration int32) (*Item, error) {
	if err := c.call("GetAndTouch", key); err != nil {
		return nil, err
	}
	return c.mc.GetAndTouch(key, expiration)
}

// Ping is the drop-in's Ping.
func (c *Client) Ping() error {
	if err := c.call("Ping"); err != nil {
		return err
	}
	return c.mc.Ping()
}

// Close is the drop-in's Close.
func (c *Client) Close() error { return c.mc.Close() }

// errInternal is what gomemcache's private connection path returns here:
// the drop-in has none, and BenchmarkOnItem, its one caller, is excluded.
var errInternal = errors.New("upstream: gomemcache's private connection path is not the drop-in's")

func (c *Client) getConn(net.Addr) (*bufio.ReadWriter, error) { return nil, errInternal }

func (c *Client) onItem(*Item, func(*Client, *bufio.ReadWriter, *Item) error) error {
	return errInternal
}

// scanGetResponseLine is gomemcache's parser of a VALUE line, here the
// drop-in's: the line read as its connections read one (wire.ReadLine,
// which needs the LF), then parsed by internal/wire/memcache.
func scanGetResponseLine(line []byte, it *Item) (size int, err error) {
	l, err := wire.ReadLine(bufio.NewReader(bytes.NewReader(line)))
	if err != nil {
		return -1, err
	}
	v, err := wirememcache.ParseValueLine(l)
	if err != nil {
		return -1, err
	}
	it.Key, it.Flags, it.CasID = string(v.Key), v.Flags, v.CAS
	return v.Size, nil
}

// crlf is the line end gomemcache's fake server writes after a value.
var crlf = []byte("\r\n")

// ServerList is gomemcache's placement (crc32 of the key, mod N); the
// drop-in's is the ring, as a gomemcache.Selector: selector_test.go's
// benchmarks measure it.
type ServerList struct {
	sel *gomemcache.Selector
}

// SetServers places keys over servers with a ring of them.
func (ss *ServerList) SetServers(servers ...string) error {
	nodes := make([]ring.Node, len(servers))
	for i, s := range servers {
		nodes[i] = ring.Node{Addr: s}
	}
	r, err := ring.New(nodes)
	if err != nil {
		return err
	}
	ss.sel, err = gomemcache.NewSelector(r)
	return err
}

// PickServer returns the address of the server that owns key.
func (ss *ServerList) PickServer(key string) (net.Addr, error) {
	if ss.sel == nil {
		return nil, gm.ErrNoServers
	}
	return ss.sel.PickServer(key)
}
