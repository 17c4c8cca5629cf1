package client

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
	"github.com/shardcache/shardcache/internal/node/redisnode"
	"github.com/shardcache/shardcache/migration"
)

// Any go-redis command on one key, applied with the migration: the building
// block of compat/goredis, whose hook classifies commands and hands the
// cache commands here, so that fallback, copies and dual writes have one
// implementation. A key is brought over whole (DUMP, PTTL, RESTORE: any
// type, with its remaining TTL), never over the key or its tombstone
// (copy.go); a command that writes leaves a tombstone on the new owner
// first (RESTORE refuses the copy of a reader who read the key before),
// since it may leave the key deleted (GETDEL, HDEL of the last field).

// RedisOp says how RedisDo applies a command during a migration, when the
// key's old and new owners differ. Outside a migration every command simply
// runs on the key's owner.
type RedisOp int

// Redis operations.
const (
	// RedisRead runs the command on the new owner; if that owner lacks the
	// key, the key is brought over from the old owner and the command runs
	// again (GET, TTL, TYPE, HGETALL, ...).
	RedisRead RedisOp = iota
	// RedisOverwrite runs the command on both owners at once: it replaces
	// the value whatever was there (SET without conditions, SETEX).
	RedisOverwrite
	// RedisUpdate brings the key over first if the new owner lacks it, then
	// runs the command on both owners (EXPIRE, HSET, HDEL, SET NX, ...).
	RedisUpdate
	// RedisCounter brings the key over first, runs the command on the new
	// owner and deletes the old owner's copy, which would drift if updated
	// apart (INCR family, HINCRBY, APPEND), as Incr does.
	RedisCounter
)

// Migrating reports whether a migration's window is open, without
// allocating: a hook checks it on every command.
func (c *Client) Migrating() bool {
	st, now := c.load()
	return st != nil && st.mig != nil && st.mig.Active(now)
}

// RedisDo runs cmd, a command on key alone, on key's owner, applying the
// migration as op says; cmd holds the reply (redis.Nil on a miss, as
// always). Copies to an old owner are new commands with cmd's arguments.
// A failure to bring the key over from its old owner (RedisRead,
// RedisUpdate, RedisCounter) is the command's error, and the command
// does not run on the new owner without it.
// On Memcached nodes it fails with ErrUnsupported (with ErrNodeDown while
// the node is held down, as every call to it).
func (c *Client) RedisDo(ctx context.Context, key string, op RedisOp, cmd redis.Cmder) error {
	begin := c.beginUpdate // runs where the value is until copies may be made
	if op == RedisRead {
		begin = c.begin
	}
	r, err := begin(ctx, key)
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	rdb, err := redisOf(r.st.conn(r.New))
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	if !r.Dual {
		return rdb.Process(ctx, cmd)
	}
	switch {
	case op == RedisRead && !r.Fallback: // before the start, or after the window
		return rdb.Process(ctx, cmd)
	case op == RedisRead:
		var exists *redis.IntCmd
		rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			exists = p.Exists(ctx, key)
			p.Process(ctx, cmd)
			return nil
		})
		if exists.Err() != nil || exists.Val() == 1 {
			if exists.Err() == nil {
				r.counters().NewHits.Add(1)
			}
			return cmd.Err()
		}
		switch found, err := c.bringOverWhole(ctx, r, key); {
		case err != nil:
			cmd.SetErr(err)
			return err
		case found:
			return rdb.Process(ctx, cmd)
		}
		return cmd.Err()
	case r.Fallback && (op == RedisUpdate || op == RedisCounter):
		if n, err := rdb.Exists(ctx, key).Result(); err == nil && n == 0 {
			if _, err := c.bringOverWhole(ctx, r, key); err != nil {
				cmd.SetErr(err) // the command would start from nothing
				return err
			}
		}
	}
	// The tombstone first, then the command, on one connection: on the new
	// owner (before the start, the tombstone goes to the other, onOld).
	process := func() error {
		if r.Before {
			return rdb.Process(ctx, cmd)
		}
		rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, redisnode.TombKey(key), redisnode.TombValue(node.TombDeleted), tombTTL(r.st, r.now))
			p.Process(ctx, cmd)
			return nil
		})
		return cmd.Err()
	}
	name := cmd.Name()
	if op == RedisCounter {
		if err := process(); err != nil {
			return err
		}
		return c.copyToOld(ctx, name, r, key, func(n node.Node) error { return n.Delete(ctx, key) })
	}
	_, oldErr := both(r, func(node.Node) error { return process() }, c.onOld(ctx, r, key, func(n node.Node) error {
		old, err := redisOf(n)
		if err == nil {
			err = old.Process(ctx, redis.NewCmd(ctx, cmd.Args()...))
		}
		if err == redis.Nil {
			err = nil // an answer
		}
		return err
	}))
	if err := cmd.Err(); err != nil {
		return err
	}
	return c.copied(name, r, key, oldErr) // as write does
}

// bringOverWhole copies key from its old owner to its new one with the
// sweep's dump and restore (Redis DUMP, PTTL, RESTORE without REPLACE): any
// type, with its remaining TTL, never over a value the new owner got
// meanwhile nor over its tombstone (copy.go). It reports whether the
// old owner had the key, and so whether the command is worth running
// again, and a failure to read the old owner or to write the copy.
func (c *Client) bringOverWhole(ctx context.Context, r route, key string) (found bool, err error) {
	err = c.fromOld(ctx, r.st, r.now, []string{key}, []migration.Route{r.Route}, copyWhole, func(*item) { found = true })
	return found, err
}
