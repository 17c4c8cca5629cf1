package sim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// request is one operation of the workload: a read or a write of key id.
type request struct {
	key   int32
	write bool
}

// workload is what every mode shares, read only: the keys' popularity, and
// which keys have no expiry.
type workload struct {
	cfg   *Config
	prob  []float64 // probability that a request is for key id; id 0 is the most popular
	noTTL []bool    // key id is written without expiry
}

func newWorkload(cfg *Config) *workload {
	w := &workload{cfg: cfg, prob: make([]float64, cfg.Keys), noTTL: make([]bool, cfg.Keys)}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x7711))
	for k := range w.noTTL {
		w.noTTL[k] = r.Float64() < cfg.NoTTL
	}
	sum := 0.0
	for k := range w.prob {
		// rand.Zipf draws k with probability proportional to (v+k)^-s.
		w.prob[k] = math.Pow(cfg.ZipfV+float64(k), -cfg.ZipfS)
		sum += w.prob[k]
	}
	for k := range w.prob {
		w.prob[k] /= sum
	}
	return w
}

// ttl returns the TTL key id is written with: 0 (no expiry) for the NoTTL
// keys.
func (w *workload) ttl(k int32) time.Duration {
	if w.noTTL[k] {
		return 0
	}
	return w.cfg.TTL
}

// keys returns the key names by id, each starting with prefix.
func (w *workload) keys(prefix string) []string {
	keys := make([]string, w.cfg.Keys)
	for k := range keys {
		keys[k] = prefix + "key:" + strconv.Itoa(k)
	}
	return keys
}

// stream returns the request generator of one mode. Every mode's stream is
// the same: it depends only on the seed.
func (w *workload) stream() *stream {
	r := rand.New(rand.NewPCG(w.cfg.Seed, 0x5eed))
	return &stream{
		r:     r,
		zipf:  rand.NewZipf(r, w.cfg.ZipfS, w.cfg.ZipfV, uint64(w.cfg.Keys-1)),
		write: w.cfg.WriteRatio,
	}
}

// stream generates requests.
type stream struct {
	r      *rand.Rand
	zipf   *rand.Zipf
	write  float64
	writes float64 // writes owed: the fraction carried over from earlier steps
}

// next fills reqs with the next len(reqs) requests. Their keys are drawn
// independently; the writes are a fixed share of every step, at random
// places in it, so the database's load varies only with the misses.
func (s *stream) next(reqs []request) {
	for i := range reqs {
		reqs[i] = request{key: int32(s.zipf.Uint64())}
	}
	s.writes += s.write * float64(len(reqs))
	n := int(s.writes)
	s.writes -= float64(n)
	for _, i := range s.r.Perm(len(reqs))[:n] {
		reqs[i].write = true
	}
}

// noExpiry is prefill's mark of a key cached without expiry.
const noExpiry time.Duration = -1

// prefill returns the remaining TTL of every key in a cache that has run the
// workload forever; 0 means not cached, noExpiry cached without expiry (a
// NoTTL key stays once it was requested, and forever it was). Filling the
// caches this way replaces
// a warm-up of several TTLs: the steps before the reshard show the steady
// state from the first one.
//
// A key's state at the start of a step is the number r of steps it stays
// visible, 0 when it is not cached. A value set in a step is visible in n
// steps, that one included, so the next step starts with r = n-1. In a step,
// a key that is not cached is set when it is requested at all, with
// probability q; a cached one is set again when it is written, with
// probability qw; otherwise r falls by one. The stationary distribution of
// this chain is π(r) = a·b^(n-1-r) for r in 1..n-1, where b = 1-qw, and
// π(0) = a·b^(n-2)·b/q: each key is drawn from it.
func (w *workload) prefill() []time.Duration {
	cfg := w.cfg
	n := int((cfg.TTL + cfg.Step - 1) / cfg.Step) // steps a value is visible
	ttl := make([]time.Duration, cfg.Keys)
	for k, none := range w.noTTL {
		if none {
			ttl[k] = noExpiry
		}
	}
	if n < 2 {
		return ttl // nothing else outlives the step it was set in
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0xf111))
	reqs := float64(cfg.Requests)
	writes := max(cfg.WriteRatio, 0) * reqs
	for k, p := range w.prob {
		if w.noTTL[k] {
			continue
		}
		miss := math.Log1p(-p)          // log of the chance one request is for another key
		q := -math.Expm1(reqs * miss)   // the key is requested in a step
		b := math.Exp(writes * miss)    // the key is not written in a step
		bn := math.Pow(b, float64(n-1)) // b^(n-1)
		var cached float64              // Σ π(r), r >= 1, with a = 1
		if b < 1 {
			cached = (1 - bn) / (1 - b)
		} else {
			cached = float64(n - 1)
		}
		uncached := bn / q // π(0) with a = 1
		if r.Float64()*(cached+uncached) >= cached {
			continue
		}
		// i = n-1-r has weight b^i, i in 0..n-2: invert its distribution.
		i := r.IntN(n - 1)
		if b < 1 {
			i = int(math.Ceil(math.Log1p(-r.Float64()*(1-bn))/math.Log(b))) - 1
			i = min(max(i, 0), n-2)
		}
		ttl[k] = time.Duration(n-1-i) * cfg.Step
	}
	return ttl
}
