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
	if err = c.sendGets(keys[:]); err == nil {
		var found int
		if found, err = c.readGets(keys[:], out[:]); err == nil && found == 0 {
			err = ErrCacheMiss
		}
	}
	if err = c.end(err); err != nil {
		if err == ErrCacheMiss {
			return item{}, err
		}
		return item{}, authErr(err)
	}
	return out[0], nil
}
