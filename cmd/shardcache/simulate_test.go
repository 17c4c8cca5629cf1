package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardcache/shardcache/internal/testserver"
)

// short is a simulation small enough for -race: 40 steps of 500 requests
// over 1000 keys, 8 nodes down to 6 at step 8, a TTL of 30 steps.
var short = []string{"--keys", "1000", "--zipf-v", "40", "--requests", "500", "--ttl", "5m", "--steps", "40", "--reshard-at", "8", "--workers", "4"}

// simOutput is the part of simulate's --json output the tests read.
type simOutput struct {
	Steps     int `json:"steps"`
	ReshardAt int `json:"reshard_at"`
	Modes     []struct {
		Mode          string  `json:"mode"`
		SteadyHitRate float64 `json:"steady_hit_rate"`
		MinHitRate    float64 `json:"min_hit_rate"`
		SteadyDBLoad  float64 `json:"steady_db_load"`
		PeakDBLoad    int64   `json:"peak_db_load"`
		Swept         int64   `json:"swept"`
		Stale, Errors int64
		Steps         []struct {
			HitRate float64 `json:"hit_rate"`
		} `json:"steps"`
	} `json:"modes"`
}

// TestSimulate runs a short simulation with --json and --svg: the modes
// rank as they should, and the chart is well-formed SVG with the four
// series in both panels.
func TestSimulate(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "chart.svg")
	code, out, errOut := runCmd(t, append([]string{"simulate", "--json", "--svg", svg}, short...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "100%") || !strings.Contains(errOut, "4 modes × 40 steps in") {
		t.Errorf("stderr lacks the progress bar:\n%q", errOut)
	}
	var res simOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Modes) != 4 {
		t.Fatalf("%d modes", len(res.Modes))
	}
	modn, rng, dual, sweep := res.Modes[0], res.Modes[1], res.Modes[2], res.Modes[3]
	if modn.Mode != "mod-N" || rng.Mode != "ring" || dual.Mode != "dual-ring" || sweep.Mode != "dual-ring+sweep" {
		t.Fatalf("modes %s, %s, %s, %s", modn.Mode, rng.Mode, dual.Mode, sweep.Mode)
	}
	// The sweep copies at the reshard what the dual-ring's reads copy later:
	// the same hits, no reads of the old owners, and a short window.
	if sweep.Swept == 0 || sweep.MinHitRate < 0.95*sweep.SteadyHitRate || sweep.MinHitRate < rng.MinHitRate {
		t.Errorf("dual-ring+sweep: swept %d, low hit rate %.3f (steady %.3f, ring %.3f)", sweep.Swept, sweep.MinHitRate, sweep.SteadyHitRate, rng.MinHitRate)
	}
	if !(modn.MinHitRate < rng.MinHitRate-0.15 && rng.MinHitRate < dual.MinHitRate) || dual.MinHitRate < 0.95*dual.SteadyHitRate {
		t.Errorf("low hit rates: mod-N %.3f, ring %.3f, dual-ring %.3f (steady %.3f)", modn.MinHitRate, rng.MinHitRate, dual.MinHitRate, dual.SteadyHitRate)
	}
	if !(modn.PeakDBLoad > rng.PeakDBLoad && rng.PeakDBLoad > dual.PeakDBLoad) {
		t.Errorf("DB peaks: mod-N %d, ring %d, dual-ring %d", modn.PeakDBLoad, rng.PeakDBLoad, dual.PeakDBLoad)
	}
	checkSVG(t, svg, []string{"mod-N", "ring", "dual-ring", "dual-ring+sweep"}, 40)
}

// checkSVG parses the chart with encoding/xml and checks it has, in each
// panel, one polyline of steps points per mode, and the reshard marked.
func checkSVG(t *testing.T, path string, modes []string, steps int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	series := map[string]int{} // "panel/mode" → points
	root, reshard := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Space + " " + el.Name.Local
		}
		attr := map[string]string{}
		for _, a := range el.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case el.Name.Local == "polyline":
			series[attr["data-panel"]+"/"+attr["data-mode"]] = len(strings.Fields(attr["points"]))
		case el.Name.Local == "line" && attr["class"] == "reshard":
			reshard++
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg", root)
	}
	if reshard != 2 {
		t.Errorf("%d reshard lines, want one per panel", reshard)
	}
	if len(series) != 2*len(modes) {
		t.Errorf("series %v, want %d", series, 2*len(modes))
	}
	for _, panel := range []string{"hit", "load"} {
		for _, m := range modes {
			if n := series[panel+"/"+m]; n != steps {
				t.Errorf("%s/%s: %d points, want %d", panel, m, n, steps)
			}
		}
	}
}

// TestSimulateTable checks the text report of a tiny run.
func TestSimulateTable(t *testing.T) {
	code, out, errOut := runCmd(t, "simulate", "--quiet", "--keys", "100", "--zipf-v", "5", "--requests", "50",
		"--steps", "12", "--reshard-at", "4", "--ttl", "1m", "--every", "100", "--modes", "ring,dual-ring")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"a,b,c,d,e,f,g,h → a,b,c,d,e,f (embedded servers, simulated clock)",
		"100 keys (Zipf s=1.01 v=5, 10% without expiry), 50 requests per 10s step, 3.0% writes, TTL 1m0s, dual-ring window 1m0s, seed 1",
		"dual-ring: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Rows by their first fields, the table being aligned with spaces.
	rows := map[string]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 {
			rows[f[0]+" "+f[1]] = strings.Join(f, " ")
		}
	}
	for prefix, want := range map[string]string{
		"step time":       "step time ring hit DB dual-ring hit DB",
		"4 0:00":          "← reshard",
		"10 1:00":         "← dual-ring window over",
		"mode keys":       "mode keys moved steady hit min hit (step) of steady steady DB (max) peak DB (step) of steady stale reads",
		"dual-ring 26.2%": "dual-ring 26.2%",
	} {
		if !strings.Contains(rows[prefix], want) {
			t.Errorf("row %q is %q, want it to hold %q", prefix, rows[prefix], want)
		}
	}
	if strings.Contains(out, "mod-N") {
		t.Errorf("mod-N was not asked for:\n%s", out)
	}
	// --every 100 prints step 0, the steps around the reshard, the end of
	// the window, the last step and the extremes: not all twelve.
	if rows := strings.Count(out, "%  "); rows >= 12*2 {
		t.Errorf("%d cells: --every was ignored?\n%s", rows, out)
	}
}

// TestSimulateRedis runs simulate on real redis-server processes, in real
// time: 10 steps of 100ms, 4 nodes down to 3. Real servers expire keys on
// the wall clock, which a busy machine stretches (a late step expired keys
// and once put the ring above the dual-ring+sweep): the TTL, scaled to 36s,
// and the window outlast the run, so the hit rates depend on the placement
// alone, not on how fast the steps ran. The simulated clock's figures are
// TestSimulate's.
func TestSimulateRedis(t *testing.T) {
	servers := testserver.Redis(t, 4)
	code, out, errOut := runCmd(t, "simulate", "--json",
		"--redis", strings.Join(testserver.Addrs(servers), ","),
		"--from", "a=cache-a:6379,b=cache-b:6379,c=cache-c:6379,d=cache-d:6379",
		"--to", "a=cache-a:6379,b=cache-b:6379,c=cache-c:6379",
		"--keys", "300", "--zipf-v", "10", "--requests", "150",
		"--step", "10s", "--ttl", "1h", "--real-step", "100ms", "--steps", "10", "--reshard-at", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "real servers, real time: each step lasts 100ms, the TTL is 36s") {
		t.Errorf("stderr lacks the note on time:\n%s", errOut)
	}
	var res simOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	at := res.ReshardAt
	hit := map[string]float64{}
	for _, m := range res.Modes {
		if m.Errors != 0 || m.Stale != 0 {
			t.Errorf("%s: %d errors, %d stale", m.Mode, m.Errors, m.Stale)
		}
		hit[m.Mode] = m.Steps[at].HitRate
	}
	t.Logf("hit rates at the reshard: %v", hit)
	if !(hit["mod-N"] < hit["ring"] && hit["ring"] < hit["dual-ring"] && hit["ring"] < hit["dual-ring+sweep"]) {
		t.Errorf("hit rates at the reshard %v: want mod-N < ring < dual-ring, and ring < dual-ring+sweep", hit)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		hi   float64
		want string
	}{
		{100, "[0 20 40 60 80 100]"},
		{1857, "[0 500 1000 1500 2000]"},
		{19.8, "[0 5 10 15 20]"},
		{0, "[0 0.2 0.4 0.6 0.8 1]"},
		{3, "[0 0.5 1 1.5 2 2.5 3]"},
	} {
		if got := strings.ReplaceAll(strings.Trim(jsonString(niceTicks(tc.hi)), "[]"), ",", " "); "["+got+"]" != tc.want {
			t.Errorf("niceTicks(%v) = [%s], want %s", tc.hi, got, tc.want)
		}
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestSimulateInterrupted checks that a cancelled run (Ctrl-C) exits with
// status 1 and says so.
func TestSimulateInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, append([]string{"simulate", "--quiet"}, short...), &out, &errOut)
	if code != exitFail || !strings.Contains(errOut.String(), "interrupted") || out.Len() != 0 {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errOut.String(), out.String())
	}
}
