package goredis

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/client"
)

// hook is the Ring-level go-redis hook that makes multi-key commands correct
// across shards and applies the migration (see the package doc).
type hook struct{ r *Ring }

// send runs one command the way the Ring would have: next of the hook chain.
type send func(ctx context.Context, cmd redis.Cmder) error

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.r.check(ctx, cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return h.r.process(ctx, cmd, send(next), h.r.c.Migrating())
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.r.check(ctx, cmd); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return h.r.pipeline(ctx, cmds, next)
	}
}

// check refuses what must not be sent: a nil context (client.ErrNilContext:
// go-redis would panic on it) and a value argument longer than
// Options.MaxValueSize (client.ErrValueTooLarge: Redis would refuse it
// after reading it whole).
func (r *Ring) check(ctx context.Context, cmd redis.Cmder) error {
	if ctx == nil {
		return client.ErrNilContext
	}
	for _, a := range cmd.Args() {
		n := 0
		switch a := a.(type) {
		case string:
			n = len(a)
		case []byte:
			n = len(a)
		}
		if n > r.maxValue {
			return fmt.Errorf("%w: %s with an argument of %d bytes, more than %d", client.ErrValueTooLarge, cmd.Name(), n, r.maxValue)
		}
	}
	return nil
}

var _ redis.Hook = hook{}

// process runs one command: split, refused, handed to the migration, or
// passed on unchanged.
func (r *Ring) process(ctx context.Context, cmd redis.Cmder, next send, migrating bool) error {
	switch kind, keys := r.classify(cmd, migrating); kind {
	case split:
		return r.split(ctx, cmd, next, migrating)
	case refused:
		return r.refuse(cmd, keys)
	case migrated:
		key, _ := keyArg(cmd.Args()[1])
		op, _ := opOf(cmd.Name(), cmd.Args())
		return r.c.RedisDo(ctx, key, op, cmd)
	}
	return next(ctx, cmd)
}

type kind int

const (
	plain    kind = iota // the Ring's own routing, by the first key
	split                // a multi-key command split by owner
	refused              // a multi-key command across nodes
	migrated             // a one-key cache command during a migration
)

// classify says how cmd must run. Only the first argument is looked at for
// most commands: plain ones cost a map look-up or two.
func (r *Ring) classify(cmd redis.Cmder, migrating bool) (kind, []any) {
	args := cmd.Args()
	if len(args) < 2 {
		return plain, nil
	}
	name := cmd.Name()
	if migrating {
		if _, ok := MigratedCommands[name]; ok {
			if _, isKey := keyArg(args[1]); isKey {
				return migrated, nil
			}
		}
	}
	switch name {
	case "mget", "mset", "del", "unlink", "exists", "touch":
		if migrating || r.spans(keysOf(name, args)) {
			return split, nil
		}
		return plain, nil
	}
	if keysOf := CrossShardCommands[name]; keysOf != nil {
		if keys := keysOf(args); r.spans(keys) {
			return refused, keys
		}
	}
	return plain, nil
}

func keysOf(name string, args []any) []any {
	if name == "mset" {
		return everyOther(args)
	}
	return args[1:]
}

// spans reports whether keys have more than one owner.
func (r *Ring) spans(keys []any) bool {
	first := ""
	for _, k := range keys {
		s, ok := keyArg(k)
		if !ok {
			continue
		}
		addr := r.c.Locate(s).Addr
		if first == "" {
			first = addr
		} else if addr != first {
			return true
		}
	}
	return false
}

func (r *Ring) refuse(cmd redis.Cmder, keys []any) error {
	at := func(a any) (string, string) {
		k, _ := keyArg(a)
		return k, r.c.Locate(k).Name
	}
	k0, n0 := at(keys[0])
	k1, n1 := k0, n0
	for _, a := range keys[1:] {
		if k1, n1 = at(a); n1 != n0 {
			break
		}
	}
	err := fmt.Errorf("%w: %s has key %q on node %s and %q on node %s; a hash tag ({tag}) keeps keys on one node",
		ErrCrossShard, cmd.Name(), k0, n0, k1, n1)
	cmd.SetErr(err)
	return err
}

// split runs a multi-key command as one command per owner (or, during a
// migration, per key through the migration) and merges the answers in the
// order of the keys.
func (r *Ring) split(ctx context.Context, cmd redis.Cmder, next send, migrating bool) error {
	name, args := cmd.Name(), cmd.Args()
	if name == "mget" && migrating {
		return r.mgetMigrating(ctx, cmd, args[1:])
	}
	stride := 1
	if name == "mset" {
		stride = 2
		if len(args)%2 == 0 {
			return next(ctx, cmd) // malformed: the server's own error
		}
	}
	// Groups of argument positions by owner (or one per key when migrating).
	var groups [][]int
	byAddr := map[string]int{}
	for i := 1; i < len(args); i += stride {
		k, ok := keyArg(args[i])
		if !ok {
			return next(ctx, cmd)
		}
		g := len(groups)
		if !migrating {
			addr := r.c.Locate(k).Addr
			if j, seen := byAddr[addr]; seen {
				g = j
			} else {
				byAddr[addr] = g
			}
		} else if name == "del" || name == "unlink" || name == "mset" {
			// One key at a time: deleted twice it counts once, set twice
			// the last value wins.
			if j, seen := byAddr[k]; seen {
				if name == "mset" {
					groups[j] = []int{i}
				}
				continue
			}
			byAddr[k] = g
		}
		if g == len(groups) {
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	subs := make([]redis.Cmder, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, pos := range groups {
		sub := []any{name}
		for _, i := range pos {
			sub = append(sub, args[i:i+stride]...)
		}
		switch name {
		case "mget":
			subs[g] = redis.NewSliceCmd(ctx, sub...)
		case "mset":
			subs[g] = redis.NewStatusCmd(ctx, sub...)
		default:
			subs[g] = redis.NewIntCmd(ctx, sub...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = r.runPart(ctx, subs[g], next, migrating)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && err != redis.Nil {
			cmd.SetErr(err)
			return err
		}
	}
	switch name {
	case "mget":
		vals := make([]any, len(args)-1)
		for g, pos := range groups {
			for j, i := range pos {
				vals[i-1] = subs[g].(*redis.SliceCmd).Val()[j]
			}
		}
		return setVal(cmd, vals)
	case "mset":
		return setVal(cmd, "OK")
	}
	var n int64
	for _, sub := range subs {
		n += sub.(*redis.IntCmd).Val()
	}
	return setVal(cmd, n)
}

// runPart runs one part of a split command: on its owner, or during a
// migration, one key through the migration.
func (r *Ring) runPart(ctx context.Context, sub redis.Cmder, next send, migrating bool) error {
	if !migrating {
		return next(ctx, sub)
	}
	args := sub.Args()
	key, _ := keyArg(args[1])
	switch sub.Name() {
	case "del", "unlink":
		found, err := r.c.DeleteFound(ctx, key)
		if found {
			sub.(*redis.IntCmd).SetVal(1)
		}
		return err
	case "exists":
		return r.c.RedisDo(ctx, key, client.RedisRead, sub)
	case "touch":
		return r.c.RedisDo(ctx, key, client.RedisUpdate, sub)
	}
	// mset: one SET per key.
	set := redis.NewStatusCmd(ctx, "set", args[1], args[2])
	return r.c.RedisDo(ctx, key, client.RedisOverwrite, set)
}

// mgetMigrating is MGET during a migration: client.GetMulti, with its
// fallback and backfills.
func (r *Ring) mgetMigrating(ctx context.Context, cmd redis.Cmder, keyArgs []any) error {
	keys := make([]string, len(keyArgs))
	for i, a := range keyArgs {
		keys[i], _ = keyArg(a)
	}
	hits, err := r.c.GetMulti(ctx, keys)
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	vals := make([]any, len(keys))
	for i, k := range keys {
		if v, ok := hits[k]; ok {
			vals[i] = string(v)
		}
	}
	return setVal(cmd, vals)
}

// setVal stores a merged answer in cmd, of the type MGet, MSet, Del... or
// Do made it.
func setVal(cmd redis.Cmder, v any) error {
	switch c := cmd.(type) {
	case *redis.Cmd:
		c.SetVal(v)
	case *redis.SliceCmd:
		c.SetVal(v.([]any))
	case *redis.StatusCmd:
		c.SetVal(v.(string))
	case *redis.IntCmd:
		c.SetVal(v.(int64))
	default:
		err := fmt.Errorf("shardcache: %s split across nodes cannot answer a %T", cmd.Name(), cmd)
		cmd.SetErr(err)
		return err
	}
	cmd.SetErr(nil)
	return nil
}

// pipeline runs a pipeline: runs of plain commands go on together as one
// pipeline, the others one at a time in their place, so the order of the
// commands holds. A transaction whose keys span nodes is refused whole.
func (r *Ring) pipeline(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	if len(cmds) > 0 && cmds[0].Name() == "multi" {
		var keys []any
		for _, cmd := range cmds[1 : len(cmds)-1] {
			if args := cmd.Args(); len(args) > 1 {
				keys = append(keys, args[1])
			}
		}
		if r.spans(keys) {
			err := fmt.Errorf("%w: a MULTI/EXEC transaction must keep its keys on one node (a hash tag does)", ErrCrossShard)
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
	migrating := r.c.Migrating()
	one := func(ctx context.Context, cmd redis.Cmder) error { return next(ctx, []redis.Cmder{cmd}) }
	start := 0 // the first plain command not sent yet
	flush := func(end int) {
		if end > start {
			next(ctx, cmds[start:end])
		}
	}
	for i, cmd := range cmds {
		if k, _ := r.classify(cmd, migrating); k == plain {
			continue
		}
		flush(i)
		start = i + 1
		r.process(ctx, cmd, one, migrating)
	}
	flush(len(cmds))
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}
