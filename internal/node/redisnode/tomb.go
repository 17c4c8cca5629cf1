package redisnode

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

// Tombstones on Redis (node.Bury): a key of its own beside the buried one,
// TombPrefix and the key's name, so that the buried key is really gone
// (EXISTS, TYPE and a foreign client's GET see nothing) and reads need no
// check. The tombstone's value is its kind: "1" a Delete's
// (node.TombDeleted), "w" a write's (node.TombWritten). The copies
// (AddMulti, Restore) are scripts that store only when neither the key
// nor its tombstone exists, atomically, or, for a copy marked
// node.Item.OverWritten, when the tombstone is a write's (the script then
// deletes it); a write of a value leaves the tombstone, which then only
// keeps copies away.

// TombPrefix starts the name of a key's tombstone: TombPrefix + key. A
// sweep skips these keys.
const TombPrefix = "shardcache:tomb:"

var (
	// KEYS: the keys, then their tombstones. ARGV: the tombstones' TTL in
	// milliseconds, and their kind's value. It returns DEL's answer for
	// each key.
	buryScript = redis.NewScript(`
local n = #KEYS / 2
local found = {}
for i = 1, n do
	found[i] = redis.call('DEL', KEYS[i])
	redis.call('SET', KEYS[n+i], ARGV[2], 'PX', ARGV[1])
end
return found`)
	// KEYS: the keys, then their tombstones. ARGV: value i, its TTL in
	// milliseconds (0: none) and 1 if it may replace a write's tombstone
	// (else 0), for each key. It returns 1 for each key stored, 0 for
	// each present or buried.
	copyScript = redis.NewScript(`
local n = #KEYS / 2
local stored = {}
for i = 1, n do
	stored[i] = 0
	local t = redis.call('GET', KEYS[n+i])
	if t == 'w' and ARGV[3*i] == '1' and redis.call('EXISTS', KEYS[i]) == 0 then
		redis.call('DEL', KEYS[n+i])
		t = false
	end
	if not t then
		local ttl = tonumber(ARGV[3*i-1])
		local ok
		if ttl > 0 then
			ok = redis.call('SET', KEYS[i], ARGV[3*i-2], 'NX', 'PX', ttl)
		else
			ok = redis.call('SET', KEYS[i], ARGV[3*i-2], 'NX')
		end
		if ok then stored[i] = 1 end
	end
end
return stored`)
	// KEYS: the keys, then their tombstones. ARGV: DUMP's payload i, its
	// TTL in milliseconds (0: none) and 1 if it may replace a write's
	// tombstone (else 0), for each key. It returns 1 for each key
	// restored, 0 for each present or buried, and RESTORE's refusal for
	// the others.
	restoreScript = redis.NewScript(`
local n = #KEYS / 2
local stored = {}
for i = 1, n do
	stored[i] = 0
	local t = redis.call('GET', KEYS[n+i])
	if redis.call('EXISTS', KEYS[i]) == 0 and (not t or (t == 'w' and ARGV[3*i] == '1')) then
		local r = redis.pcall('RESTORE', KEYS[i], ARGV[3*i-1], ARGV[3*i-2])
		if type(r) == 'table' and r.err then
			stored[i] = r.err
		else
			stored[i] = 1
			if t then redis.call('DEL', KEYS[n+i]) end
		end
	end
end
return stored`)
)

// scriptOps are the kinds of call the package's scripts are, by SHA-1.
var scriptOps = map[string]node.Op{
	storeLeasedScript.Hash():   node.OpLease,
	releaseLeasesScript.Hash(): node.OpLease,
	buryScript.Hash():          node.OpDeleteMulti,
	copyScript.Hash():          node.OpAddMulti,
	restoreScript.Hash():       node.OpSweep,
	leaseGetScript.Hash():      node.OpGetMulti, // a read (LeaseGet), its keys counted
}

// TombKey returns the name of key's tombstone.
func TombKey(key string) string { return TombPrefix + key }

// withTombs returns keys followed by their tombstones' names.
func withTombs(keys []string) []string {
	all := make([]string, len(keys), 2*len(keys))
	copy(all, keys)
	for _, k := range keys {
		all = append(all, TombKey(k))
	}
	return all
}

// TombValue returns the value of a tombstone of kind k.
func TombValue(k node.TombKind) string {
	if k == node.TombWritten {
		return "w"
	}
	return "1"
}

// Bury deletes keys and sets each one's tombstone, of kind and expiring
// after d, in one script; found[i] reports whether keys[i] was present.
func (n *Node) Bury(ctx context.Context, keys []string, d time.Duration, kind node.TombKind) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	res, err := buryScript.Run(live(ctx), n.rdb, withTombs(keys), ttl(d).Milliseconds(), TombValue(kind)).Int64Slice()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	found := make([]bool, len(keys))
	for i := range found {
		found[i] = i < len(res) && res[i] > 0
	}
	return found, nil
}

// copyArgs returns the keys of items and the arguments of copyScript and
// restoreScript for them.
func copyArgs(items []node.Item) ([]string, []any) {
	keys := make([]string, len(items))
	args := make([]any, 0, 3*len(items))
	for i, it := range items {
		keys[i] = it.Key
		over := 0
		if it.OverWritten {
			over = 1
		}
		args = append(args, it.Value, ttl(it.TTL).Milliseconds(), over)
	}
	return keys, args
}

// AddMulti stores each item whose key is neither present nor buried (or
// buried by a write, for an item marked OverWritten), in one script.
func (n *Node) AddMulti(ctx context.Context, items []node.Item) ([]bool, error) {
	if len(items) == 0 {
		return nil, nil
	}
	keys, args := copyArgs(items)
	res, err := copyScript.Run(live(ctx), n.rdb, withTombs(keys), args...).Int64Slice()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	stored := make([]bool, len(items))
	for i := range stored {
		stored[i] = i < len(res) && res[i] == 1
	}
	return stored, nil
}

// Restore writes each dumped item whose key is neither present nor
// buried, in one script: RESTORE without REPLACE.
func (n *Node) Restore(ctx context.Context, items []node.Item) ([]bool, error) {
	if len(items) == 0 {
		return nil, nil
	}
	keys, args := copyArgs(items)
	res, err := restoreScript.Run(live(ctx), n.rdb, withTombs(keys), args...).Slice()
	if err != nil {
		return nil, mapErr(ctx, err)
	}
	stored := make([]bool, len(items))
	var failed error
	for i := range stored {
		if i >= len(res) {
			break
		}
		switch v := res[i].(type) {
		case int64:
			stored[i] = v == 1
		case string: // RESTORE refused the payload
			if failed == nil {
				failed = fmt.Errorf("restore %s: %s", keys[i], strings.TrimSpace(v))
			}
		}
	}
	return stored, failed
}
