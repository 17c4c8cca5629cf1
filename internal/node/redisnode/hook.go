package redisnode

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// The node's observer sees every command of its go-redis client, the
// package's own and those sent through Node.Redis alike, from one hook: a
// single command as one call of the kind its name says (opOf); a pipeline
// the package sent as one call of the kind its context carries (withOp);
// any other pipeline command by command, each with the pipeline's time.
// The auto-pipeliner's batches are the exception: go-redis runs them on
// context.Background(), and reading a batched command's result inside the
// batch costs go-redis a stack trace to tell which goroutine asks, so the
// hook leaves them to autoPipe, which tells the observer of each command
// once its batch is done. The node's own commands never run on
// context.Background() (live), so the hook tells them apart; a command or
// pipeline sent through Node.Redis on context.Background() is skipped with
// the batches, and not counted.

// hook reports the commands of a node's go-redis client to its observer.
type hook struct {
	obs  node.Observer
	near *nearCache // nil without a near cache
}

func newHook(obs node.Observer, near *nearCache) redis.Hook { return hook{obs: obs, near: near} }

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		observe := ctx != context.Background() // else an auto-pipeliner's batch of one: see above
		start := k.obs.Begin()
		var m *nearMark
		if k.near != nil {
			m = &nearMark{Context: ctx}
			ctx = m
			k.near.evict(cmd) // before, and again after (see nearcache.go)
		}
		err := next(ctx, cmd)
		if m != nil {
			ctx = m.Context
			if m.hit.Load() { // answered from process memory: no call to the node
				return err
			}
			k.near.evict(cmd)
		}
		if !observe {
			return err
		}
		op := opOf(cmd)
		if op == node.OpSetup && errors.As(err, new(dialError)) {
			return err // the command that needed the connection reports the dial's failure
		}
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			return err // go-redis sends the script itself next: that is the call
		}
		k.obs.Done(ctx, op, start, observed(err))
		if err == nil {
			countKeys(k.obs, op, cmd)
		}
		return err
	}
}

// observed is err as the observer reads it: go-redis's miss and closed
// client as the node's own.
func observed(err error) error {
	switch {
	case err == nil:
		return nil
	case err == redis.Nil:
		return node.ErrCacheMiss
	case errors.Is(err, redis.ErrClosed):
		return node.ErrClosed
	}
	return err
}

func (k hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if k.near != nil { // before, and again after (see nearcache.go)
			for _, cmd := range cmds {
				k.near.evict(cmd)
			}
		}
		if ctx == context.Background() { // an auto-pipeliner's batch: see above
			err := next(ctx, cmds)
			if k.near != nil {
				for _, cmd := range cmds {
					k.near.evict(cmd)
				}
			}
			return err
		}
		start := k.obs.Begin()
		err := next(ctx, cmds)
		if op, ok := ctx.Value(opKey{}).(node.Op); ok {
			k.obs.Done(ctx, op, start, observed(err))
			if err == nil || err == redis.Nil {
				countKeys(k.obs, op, cmds...)
			}
		} else {
			for _, cmd := range cmds {
				cerr := cmd.Err()
				if cerr == nil && err != nil && err != redis.Nil {
					cerr = err // the pipeline failed around the command
				}
				op := opOf(cmd)
				k.obs.Done(ctx, op, start, observed(cerr))
				if cerr == nil {
					countKeys(k.obs, op, cmd)
				}
			}
		}
		if k.near != nil {
			for _, cmd := range cmds {
				k.near.evict(cmd)
			}
		}
		return err
	}
}

// opOf names a go-redis command as a kind of call: the commands the node
// sends, then "ping" and "other".
func opOf(cmd redis.Cmder) node.Op {
	switch cmd.Name() {
	case "get":
		return node.OpGet
	case "mget":
		return node.OpGetMulti
	case "set":
		if _, nx := cmd.(*redis.BoolCmd); nx { // SetNX: SET ... NX
			return node.OpAdd
		}
		return node.OpSet
	case "del":
		if len(cmd.Args()) > 2 {
			return node.OpDeleteMulti
		}
		return node.OpDelete
	case "incrby":
		return node.OpIncr
	case "pexpire", "persist":
		return node.OpTouch
	case "evalsha", "eval":
		if op, ok := scriptOps[scriptHash(cmd)]; ok {
			return op
		}
	case "exists":
		return node.OpExists
	case "scan", "dump", "restore", "dbsize", "pttl":
		return node.OpSweep
	case "ping":
		return node.OpPing
	case "hello", "auth", "select", "client", "readonly":
		return node.OpSetup
	}
	return node.OpOther
}

// countKeys tells obs the keys a read command or pipeline found and
// missed.
func countKeys(obs node.Observer, op node.Op, cmds ...redis.Cmder) {
	if op != node.OpGetMulti {
		return
	}
	hits, misses := 0, 0
	for _, cmd := range cmds {
		switch cmd := cmd.(type) {
		case *redis.SliceCmd: // MGET
			for _, v := range cmd.Val() {
				if v == nil {
					misses++
				} else {
					hits++
				}
			}
		case *redis.StringCmd: // GET of a pipeline
			switch cmd.Err() {
			case nil:
				hits++
			case redis.Nil:
				misses++
			}
		case *redis.Cmd: // the lease read's script: a state and a value per key
			res, _ := cmd.Val().([]any)
			for i := 1; i < len(res); i += 2 {
				if _, ok := res[i].(string); ok {
					hits++
				} else {
					misses++
				}
			}
		}
	}
	obs.Keys(op, hits, misses)
}

// scriptHash returns the SHA-1 of the script an EVALSHA or EVAL runs.
func scriptHash(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	if cmd.Name() == "eval" { // the script itself, sent once a server lacks it
		sum := sha1.Sum([]byte(s))
		s = hex.EncodeToString(sum[:])
	}
	return s
}

// redactHook takes a node's password out of the errors of its commands.
// Redis never echoes a password, but a server or proxy that does not know
// HELLO or AUTH answers "unknown command ..., with args beginning with:"
// and the arguments, the password among them; go-redis returns that reply
// as the error of the command that made the connection.
type redactHook struct{ secret string }

func (redactHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redactHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && err != redis.Nil {
			if r := redact(err, h.secret); r != err {
				cmd.SetErr(r)
				return r
			}
		}
		return err
	}
}

func (h redactHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && e != redis.Nil {
				cmd.SetErr(redact(e, h.secret))
			}
		}
		return redact(err, h.secret)
	}
}

// redacted stands for a secret in printed errors.
const redacted = "[redacted]"

// redactedError is an error whose text had a secret in it, with the secret
// replaced. errors.Is sees through it to the original; nothing else does
// (no Unwrap, no As), so that no error reachable from it prints the secret.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// redact returns err with every occurrence of secret in its text replaced,
// or err itself when its text has none.
func redact(err error, secret string) error {
	if err == nil || secret == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(msg, secret, redacted), err: err}
}

// notBackground stands for context.Background() in the node's own
// commands, so that the hook tells them from the auto-pipeliner's batches,
// which go-redis runs on context.Background() (see above).
var notBackground = context.WithoutCancel(context.Background())

// live returns ctx, or notBackground for context.Background().
func live(ctx context.Context) context.Context {
	if ctx == context.Background() {
		return notBackground
	}
	return ctx
}
