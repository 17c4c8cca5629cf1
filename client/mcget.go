package client

import "context"

// A single-key Get on Memcached goes over the node's raw connections too
// (memcached_raw.go), as a multi-get of one key: "gets <key>", the classic
// command gomemcache's Get sends, so the item keeps its flags and CAS id. On
// the caller's goroutine, whatever its context: the context ends the call
// through the connection's deadline (begin, end), where gomemcache, which
// takes none, would need a goroutine to wait beside it. What is left per
// call is one allocation, the value's, exactly its size.

// getItem reads key's item, or returns ErrCacheMiss. The outcome goes to
// the node's health and statistics as a "get": a hit, a miss or an error.
func (p *rawConns) getItem(ctx context.Context, key string) (item, error) {
	if err := ctx.Err(); err != nil {
		return item{}, err // nothing sent: no outcome of the node's
	}
	keys := [1]string{key}
	var out [1]answer
	c, err := p.ask(ctx, opGet, keys[:], out[:])
	if c.rawConn != nil {
		err = c.end(err)
	}
	switch err {
	case nil:
		return out[0].item(key), nil
	case ErrCacheMiss:
		return item{}, err
	}
	return item{}, authErr(err)
}

// ask begins a call of kind o, sends "gets <keys...>" on its connection and
// reads the answer into out, one item per key: ErrCacheMiss when it holds
// none of them. The caller ends the call with the outcome it reports; when
// no connection was had, c.rawConn is nil and the failure was reported
// already (take).
func (p *rawConns) ask(ctx context.Context, o op, keys []string, out []answer) (c rawCall, err error) {
	if c, err = p.begin(ctx, o); err != nil {
		return c, err
	}
	for retried := false; ; retried = true {
		var found int
		found, err = c.ask(keys, out)
		if err == nil || found > 0 || retried || !c.pooled || !closedByPeer(err) || ctx.Err() != nil {
			return c, err
		}
		// The server closed the connection while it was idle, as it does
		// when it restarts: as a multi-get does (recv), those idle with it
		// are closed too, and the read is asked again on a new one.
		if c.stop != nil {
			c.stop()
		}
		c.abandon()
		p.closeIdle()
		clear(out) // what the closed connection left, to be read again
		start := c.start
		if c, err = p.begin(ctx, o); err != nil {
			return c, err
		}
		c.start = start
	}
}

// ask sends "gets <keys...>" and reads the answer into out; ErrCacheMiss
// when it holds none of them. found is the number of values read, even on
// an error.
func (c rawCall) ask(keys []string, out []answer) (found int, err error) {
	writeGets(c.w, keys)
	if err := c.w.Flush(); err != nil {
		if !c.pooled {
			err = lastWords(c.Conn, c.r, err)
		}
		return 0, err
	}
	found, err = c.readGets(keys, out)
	if err == nil && found == 0 {
		err = ErrCacheMiss
	}
	return found, err
}
