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
	c, err := p.begin(ctx, opGet)
	if err != nil {
		return item{}, authErr(err)
	}
	keys := [1]string{key}
	var out [1]item
	for retried := false; ; retried = true {
		err = c.ask(keys[:], out[:])
		if err == nil || retried || !c.pooled || !closedByPeer(err) || ctx.Err() != nil {
			break
		}
		// The server closed the connection while it was idle, as it does
		// when it restarts: as a multi-get does (recv), those idle with it
		// are closed too, and the Get, a read, is asked again on a new one.
		if c.stop != nil {
			c.stop()
		}
		c.Close()
		p.closeIdle()
		start := c.start
		if c, err = p.begin(ctx, opGet); err != nil {
			return item{}, authErr(err)
		}
		c.start = start
	}
	if err = c.end(err); err != nil {
		if err == ErrCacheMiss {
			return item{}, err
		}
		return item{}, authErr(err)
	}
	return out[0], nil
}

// ask sends "gets <keys...>" and reads the answer into out; ErrCacheMiss
// when it holds none of them.
func (c rawCall) ask(keys []string, out []item) error {
	writeGets(c.w, keys)
	if err := c.w.Flush(); err != nil {
		return lastWords(c.rawConn, err)
	}
	found, err := c.readGets(keys, out)
	if err == nil && found == 0 {
		err = ErrCacheMiss
	}
	return err
}
