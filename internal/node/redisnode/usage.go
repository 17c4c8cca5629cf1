package redisnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/node"
)

var _ node.UsageReporter = (*Node)(nil)

// Usage reads the server's usage: INFO memory, INFO stats and INFO
// keyspace, pipelined in one round trip through the node's go-redis
// client (its hooks see them), observed as one node.OpOther. One section
// per INFO, as Redis before 7.0 takes them. Items are the keys of the
// node's database (Config.DB).
func (n *Node) Usage(ctx context.Context) (node.Usage, error) {
	var sections [3]*redis.StringCmd
	ctx = withOp(live(ctx), node.OpOther)
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range []string{"memory", "stats", "keyspace"} {
			sections[i] = p.Info(ctx, s)
		}
		return nil
	})
	if err != nil {
		return node.Usage{}, mapErr(ctx, err)
	}
	info := map[string]string{}
	for _, s := range sections {
		parseInfo(s.Val(), info)
	}
	return usageOf(info, n.rdb.Options().DB)
}

// parseInfo adds the "name:value" lines of an INFO reply to info.
func parseInfo(reply string, info map[string]string) {
	for line := range strings.SplitSeq(reply, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if name, value, ok := strings.Cut(line, ":"); ok {
			info[name] = value
		}
	}
}

// usageOf reads a Usage from INFO's fields: a field missing or not a
// number is an error naming it, except the keyspace line of an empty
// database (Redis omits it) and total_system_memory (absent before 3.2).
func usageOf(info map[string]string, db int) (node.Usage, error) {
	u := node.Usage{Policy: info["maxmemory_policy"]}
	for _, f := range []struct {
		name     string
		v        *int64
		optional bool
	}{
		{"used_memory", &u.Bytes, false},
		{"used_memory_startup", &u.BaseBytes, true},
		{"maxmemory", &u.Limit, false},
		{"total_system_memory", &u.SystemMemory, true},
		{"evicted_keys", &u.Evictions, false},
		{"keyspace_hits", &u.Hits, false},
		{"keyspace_misses", &u.Misses, false},
	} {
		s, ok := info[f.name]
		if !ok && f.optional {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return node.Usage{}, fmt.Errorf("redis INFO: %s %q: not a number", f.name, s)
		}
		*f.v = v
	}
	// db0:keys=12,expires=3,avg_ttl=0
	if ks, ok := info["db"+strconv.Itoa(db)]; ok {
		keys, _, _ := strings.Cut(strings.TrimPrefix(ks, "keys="), ",")
		v, err := strconv.ParseInt(keys, 10, 64)
		if err != nil || !strings.HasPrefix(ks, "keys=") {
			return node.Usage{}, fmt.Errorf("redis INFO keyspace: db%d %q: no key count", db, ks)
		}
		u.Items = v
	}
	return u, nil
}
