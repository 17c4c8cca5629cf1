package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardcache/shardcache/internal/testserver"
)

// parseMget parses a raw RESP MGET reply into out (values slicing raw).
func parseMget(raw []byte, n int, out [][]byte) (int, error) {
	line := func() ([]byte, error) {
		i := bytes.IndexByte(raw, '\n')
		if i < 1 {
			return nil, errors.New("short")
		}
		l := raw[:i-1]
		raw = raw[i+1:]
		return l, nil
	}
	l, err := line()
	if err != nil {
		return 0, err
	}
	if l[0] != '*' {
		return 0, fmt.Errorf("bad %q", l)
	}
	cnt, _ := strconv.Atoi(string(l[1:]))
	if cnt != n {
		return 0, fmt.Errorf("count %d want %d", cnt, n)
	}
	found := 0
	for i := 0; i < n; i++ {
		l, err := line()
		if err != nil {
			return found, err
		}
		if l[0] == '_' || (l[0] == '$' && l[1] == '-') {
			continue
		}
		sz, err := strconv.Atoi(string(l[1:]))
		if err != nil {
			return found, err
		}
		out[i] = raw[:sz:sz]
		raw = raw[sz+2:]
		found++
	}
	return found, nil
}

func BenchmarkProtoGetMulti(b *testing.B) {
	addrs := testserver.Addrs(testserver.Redis(b, benchNodes))
	ctx := context.Background()
	sc := facade(b, 0, addrs)
	_, sets, _ := loadData(b, sc, addrs[0])
	perNode := make([]*redis.Client, len(addrs))
	aps := make([]*redis.AutoPipeliner, len(addrs))
	for j, a := range addrs {
		o := directRedisOptions(a)
		o.PipelinePoolSize = -1
		perNode[j] = redis.NewClient(o)
		defer perNode[j].Close()
		ap, err := perNode[j].AsyncAutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		aps[j] = ap
	}
	locate := func(k string) int { return slices.Index(addrs, sc.Locate(k).Addr) }
	parts := make([][][]string, len(sets))
	for j, ks := range sets {
		parts[j] = make([][]string, len(addrs))
		for _, k := range ks {
			n := locate(k)
			parts[j][n] = append(parts[j][n], k)
		}
	}
	fanOut := func(i int) error {
		var wg sync.WaitGroup
		errs := make([]error, len(addrs))
		var mu sync.Mutex
		hits := 0
		for j, ks := range parts[i%multiBatches] {
			wg.Go(func() {
				vals, err := perNode[j].MGet(ctx, ks...).Result()
				errs[j] = err
				n := 0
				for _, v := range vals {
					if s, ok := v.(string); ok && len(s) == valueSize {
						n++
					}
				}
				mu.Lock()
				hits += n
				mu.Unlock()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return checkHits(hits)
	}
	// façade-like over go-redis: partition at call time, RawCmd, map built.
	build := func(keys []string) ([][]string, [][]int) {
		ks := make([][]string, len(addrs))
		idx := make([][]int, len(addrs))
		for i, k := range keys {
			n := locate(k)
			ks[n] = append(ks[n], k)
			idx[n] = append(idx[n], i)
		}
		return ks, idx
	}
	mkCmd := func(ks []string) *redis.RawCmd {
		args := make([]any, 1+len(ks))
		args[0] = "mget"
		for i, k := range ks {
			args[1+i] = k
		}
		return redis.NewRawCmd(ctx, args...)
	}
	collect := func(keys []string, cmds []*redis.RawCmd, ks [][]string) error {
		hits := make(map[string][]byte, len(keys))
		out := make([][]byte, len(keys))
		off := 0
		for j, cmd := range cmds {
			raw, err := cmd.Result()
			if err != nil {
				return err
			}
			o := out[off : off+len(ks[j])]
			off += len(ks[j])
			if _, err := parseMget(raw, len(ks[j]), o); err != nil {
				return err
			}
			for i, v := range o {
				if v != nil {
					hits[ks[j][i]] = v
				}
			}
		}
		return checkHits(len(hits))
	}
	rawGoroutines := func(i int) error {
		keys := sets[i%multiBatches]
		ks, _ := build(keys)
		cmds := make([]*redis.RawCmd, len(addrs))
		var wg sync.WaitGroup
		for j := range addrs {
			cmds[j] = mkCmd(ks[j])
			if j == len(addrs)-1 {
				perNode[j].Process(ctx, cmds[j])
				break
			}
			wg.Go(func() { perNode[j].Process(ctx, cmds[j]) })
		}
		wg.Wait()
		return collect(keys, cmds, ks)
	}
	rawAsync := func(i int) error {
		keys := sets[i%multiBatches]
		ks, _ := build(keys)
		cmds := make([]*redis.RawCmd, len(addrs))
		futs := make([]redis.AutoFuture, len(addrs))
		for j := range addrs {
			cmds[j] = mkCmd(ks[j])
			futs[j] = aps[j].Submit(ctx, cmds[j])
		}
		for j := range futs {
			if err := futs[j].Wait(); err != nil {
				return err
			}
		}
		return collect(keys, cmds, ks)
	}
	// V1: *string args (no boxing), SliceCmd, 3 goroutines + inline.
	v1 := func(i int) error {
		keys := sets[i%multiBatches]
		ks, _ := build(keys)
		cmds := make([]*redis.SliceCmd, len(addrs))
		var wg sync.WaitGroup
		for j := range addrs {
			args := make([]any, 1+len(ks[j]))
			args[0] = "mget"
			for i := range ks[j] {
				args[1+i] = &ks[j][i]
			}
			cmds[j] = redis.NewSliceCmd(ctx, args...)
			if j == len(addrs)-1 {
				perNode[j].Process(ctx, cmds[j])
				break
			}
			wg.Go(func() { perNode[j].Process(ctx, cmds[j]) })
		}
		wg.Wait()
		hits := make(map[string][]byte, len(keys))
		for j, cmd := range cmds {
			vals, err := cmd.Result()
			if err != nil {
				return err
			}
			for i, v := range vals {
				if s, ok := v.(string); ok {
					hits[ks[j][i]] = []byte(s)[:0:0]
				}
			}
		}
		return checkHits(len(hits))
	}
	// V2: *string args, RawWriteToCmd into a presized buffer, our parse.
	v2 := func(i int) error {
		keys := sets[i%multiBatches]
		ks, _ := build(keys)
		cmds := make([]*redis.RawWriteToCmd, len(addrs))
		bufs := make([]*growBuf, len(addrs))
		var wg sync.WaitGroup
		for j := range addrs {
			args := make([]any, 1+len(ks[j]))
			args[0] = "mget"
			for i := range ks[j] {
				args[1+i] = &ks[j][i]
			}
			bufs[j] = &growBuf{b: make([]byte, 0, 3200)}
			cmds[j] = redis.NewRawWriteToCmd(ctx, bufs[j], args...)
			if j == len(addrs)-1 {
				perNode[j].Process(ctx, cmds[j])
				break
			}
			wg.Go(func() { perNode[j].Process(ctx, cmds[j]) })
		}
		wg.Wait()
		hits := make(map[string][]byte, len(keys))
		out := make([][]byte, len(keys))
		off := 0
		for j, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				return err
			}
			o := out[off : off+len(ks[j])]
			off += len(ks[j])
			if _, err := parseMget(bufs[j].b, len(ks[j]), o); err != nil {
				return err
			}
			for i, v := range o {
				if v != nil {
					hits[ks[j][i]] = v
				}
			}
		}
		return checkHits(len(hits))
	}
	facadeMulti := func(i int) error {
		hits, err := sc.GetMulti(ctx, sets[i%multiBatches])
		if err != nil {
			return err
		}
		return checkHits(len(hits))
	}
	for _, mode := range []struct {
		name string
		run  func(func(int) error) func(*testing.B)
		pair func(base, ours func(int) error) func(*testing.B)
	}{{"serial", serial, pairedSerial}, {"parallel", parallel, pairedParallel}} {
		b.Run(mode.name+"/floor", mode.run(fanOut))
		b.Run(mode.name+"/raw-goroutines", mode.run(rawGoroutines))
		b.Run(mode.name+"/raw-async", mode.run(rawAsync))
		b.Run(mode.name+"/facade-today", mode.run(facadeMulti))
		b.Run(mode.name+"/paired-rawgoroutines-vs-floor", mode.pair(fanOut, rawGoroutines))
		b.Run(mode.name+"/paired-rawasync-vs-floor", mode.pair(fanOut, rawAsync))
		b.Run(mode.name+"/paired-facade-vs-floor", mode.pair(fanOut, facadeMulti))
		b.Run(mode.name+"/v1", mode.run(v1))
		b.Run(mode.name+"/v2", mode.run(v2))
		b.Run(mode.name+"/paired-v1-vs-floor", mode.pair(fanOut, v1))
		b.Run(mode.name+"/paired-v2-vs-floor", mode.pair(fanOut, v2))
	}
}

type growBuf struct{ b []byte }

func (g *growBuf) Write(p []byte) (int, error) { g.b = append(g.b, p...); return len(p), nil }

func (g *growBuf) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if len(g.b) == cap(g.b) {
			g.b = slices.Grow(g.b, 512)
		}
		n, err := r.Read(g.b[len(g.b):cap(g.b)])
		g.b = g.b[:len(g.b)+n]
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
