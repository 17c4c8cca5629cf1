package goredis

import (
	"strconv"
	"strings"

	"github.com/shardcache/shardcache/client"
)

// MigratedCommands are the one-key cache commands the hook applies the
// migration to during a window, and how (see client.RedisOp). Every other
// command goes to the key's new owner only.
var MigratedCommands = map[string]client.RedisOp{
	// Reads: the new owner, else the key brought over from the old one.
	"get": client.RedisRead, "getrange": client.RedisRead, "substr": client.RedisRead,
	"strlen": client.RedisRead, "getbit": client.RedisRead, "bitcount": client.RedisRead,
	"bitpos": client.RedisRead, "ttl": client.RedisRead, "pttl": client.RedisRead,
	"expiretime": client.RedisRead, "pexpiretime": client.RedisRead, "type": client.RedisRead,
	"dump": client.RedisRead,
	"hget": client.RedisRead, "hgetall": client.RedisRead, "hmget": client.RedisRead,
	"hkeys": client.RedisRead, "hvals": client.RedisRead, "hlen": client.RedisRead,
	"hexists": client.RedisRead, "hstrlen": client.RedisRead, "hrandfield": client.RedisRead,
	"hscan": client.RedisRead,
	// Overwrites: both owners at once. SET with NX, XX, GET or KEEPTTL is
	// an update (see opOf).
	"set": client.RedisOverwrite, "setex": client.RedisOverwrite, "psetex": client.RedisOverwrite,
	// Updates: brought over first, then both owners.
	"setnx": client.RedisUpdate, "getex": client.RedisUpdate, "getset": client.RedisUpdate,
	"getdel": client.RedisUpdate, "expire": client.RedisUpdate, "pexpire": client.RedisUpdate,
	"expireat": client.RedisUpdate, "pexpireat": client.RedisUpdate, "persist": client.RedisUpdate,
	"hset": client.RedisUpdate, "hmset": client.RedisUpdate, "hsetnx": client.RedisUpdate,
	"hdel": client.RedisUpdate, "setbit": client.RedisUpdate,
	// Counters: brought over first, the new owner, the old copy deleted.
	"incr": client.RedisCounter, "incrby": client.RedisCounter, "incrbyfloat": client.RedisCounter,
	"decr": client.RedisCounter, "decrby": client.RedisCounter, "append": client.RedisCounter,
	"setrange": client.RedisCounter, "hincrby": client.RedisCounter, "hincrbyfloat": client.RedisCounter,
}

// SplitCommands are the multi-key commands the hook splits by owner, merging
// the answers in order; during a migration each key goes through the
// migration (MGET through client.GetMulti, the others one key at a time).
var SplitCommands = []string{"mget", "mset", "del", "unlink", "exists", "touch"}

// CrossShardCommands are the multi-key commands that fail with
// ErrCrossShard when their keys span nodes; on one node they run as usual.
// Each maps to the positions of its keys in the command's arguments.
var CrossShardCommands = map[string]func(args []any) []any{
	"msetnx": everyOther, "bitop": from(2),
	"sdiff": from(1), "sinter": from(1), "sunion": from(1),
	"sdiffstore": from(1), "sinterstore": from(1), "sunionstore": from(1),
	"pfcount": from(1), "pfmerge": from(1),
	"rename": first(2), "renamenx": first(2), "copy": first(2), "smove": first(2),
	"lmove": first(2), "blmove": first(2), "rpoplpush": first(2), "brpoplpush": first(2),
	"lcs": first(2), "zrangestore": first(2), "geosearchstore": first(2),
	"blpop": butLast, "brpop": butLast, "bzpopmin": butLast, "bzpopmax": butLast,
	"sintercard": numkeys(1), "zunion": numkeys(1), "zinter": numkeys(1), "zdiff": numkeys(1),
	"zintercard": numkeys(1), "lmpop": numkeys(1), "zmpop": numkeys(1),
	"blmpop": numkeys(2), "bzmpop": numkeys(2),
	"eval": numkeys(2), "evalsha": numkeys(2), "eval_ro": numkeys(2), "evalsha_ro": numkeys(2),
	"fcall": numkeys(2), "fcall_ro": numkeys(2),
	"zunionstore": storeNumkeys, "zinterstore": storeNumkeys, "zdiffstore": storeNumkeys,
	"xread": streams, "xreadgroup": streams,
}

func from(i int) func([]any) []any {
	return func(args []any) []any {
		if len(args) <= i {
			return nil
		}
		return args[i:]
	}
}

func first(n int) func([]any) []any {
	return func(args []any) []any { return args[1:min(len(args), n+1)] }
}

func butLast(args []any) []any {
	if len(args) < 3 {
		return nil
	}
	return args[1 : len(args)-1]
}

func everyOther(args []any) []any {
	var keys []any
	for i := 1; i < len(args); i += 2 {
		keys = append(keys, args[i])
	}
	return keys
}

// numkeys reads the count of keys at position i; the keys follow it.
func numkeys(i int) func([]any) []any {
	return func(args []any) []any {
		if len(args) <= i {
			return nil
		}
		n, ok := intArg(args[i])
		if !ok || n < 0 || i+1+n > len(args) {
			return nil
		}
		return args[i+1 : i+1+n]
	}
}

// storeNumkeys is ZUNIONSTORE's layout: destination, numkeys, keys.
func storeNumkeys(args []any) []any {
	if len(args) < 2 {
		return nil
	}
	return append([]any{args[1]}, numkeys(2)(args)...)
}

// streams is XREAD's layout: ... STREAMS key... id..., as many ids as keys.
func streams(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok && strings.EqualFold(s, "streams") {
			rest := args[i+1:]
			return rest[:len(rest)/2]
		}
	}
	return nil
}

func intArg(a any) (int, bool) {
	switch v := a.(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case string:
		n, err := strconv.Atoi(v)
		return n, err == nil
	}
	return 0, false
}

// keyArg returns a key argument as a string; go-redis takes keys as
// strings, but Do accepts anything.
func keyArg(a any) (string, bool) {
	switch v := a.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// opOf returns how the migration applies to a one-key command.
func opOf(name string, args []any) (client.RedisOp, bool) {
	op, ok := MigratedCommands[name]
	if ok && name == "set" {
		for _, a := range args[min(3, len(args)):] {
			if s, isStr := a.(string); isStr {
				switch strings.ToLower(s) {
				case "nx", "xx", "get", "keepttl":
					return client.RedisUpdate, true
				}
			}
		}
	}
	return op, ok
}
