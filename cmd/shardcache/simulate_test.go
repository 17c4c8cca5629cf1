package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
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
		"100 keys (Zipf s=1.01 v=5, 10% without expiry), 50 requests per 10s step, 3.0% writes\nTTL 1m0s, dual-ring window 1m0s, seed 1\n",
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
		"ring dual-ring":  "ring dual-ring",
		"step time":       "step time hit DB hit DB",
		"4 0:00":          "← reshard",
		"10 1:00":         "← dual-ring window over",
		"mode keys":       "mode keys moved steady hit min hit (step) of steady stale reads",
		"mode steady":     "mode steady DB (max) peak DB (step) of steady",
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

// TestSimulateBar checks that the progress bar's total is the run's work,
// every mode's steps, and that the run advances it that many times: it
// fills as the run ends. A total of the steps alone filled at a quarter of
// the default run, which then looked hung.
func TestSimulateBar(t *testing.T) {
	for _, modes := range [][]sim.Mode{nil, {sim.ModeRing, sim.ModeDualRing}} {
		cfg := sim.Config{Keys: 100, ZipfV: 5, Requests: 50, TTL: time.Minute, Steps: 6, ReshardAt: 2, Workers: 2, Seed: 1, Modes: modes}
		bar := simBar(io.Discard, &cfg)
		var mu sync.Mutex
		advances := 0
		advance := cfg.Progress
		cfg.Progress = func(done, total int) {
			advance(done, total)
			mu.Lock()
			advances++
			mu.Unlock()
		}
		res, err := sim.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		work := int64(len(res.Modes) * res.Config.Steps)
		if total, done := bar.GetMax64(), bar.State().CurrentNum; total != work || done != total || int64(advances) != work {
			t.Errorf("modes %v: the bar's total %d, its count %d after %d advances; want the work, %d modes × %d steps = %d",
				modes, total, done, advances, len(res.Modes), res.Config.Steps, work)
		}
	}
}

// wideResult is a result of the default settings (sim.DefaultConfig, all
// the modes of cfg) with its figures as wide as they get there: hit rates
// of 100.0%, a database load of all 3000 requests, every read stale.
func wideResult(cfg sim.Config) *sim.Result {
	res := &sim.Result{Config: cfg}
	mode := func(r sim.ModeResult) sim.ModeResult {
		r.Moved, r.SteadyHitRate, r.MinHitRate, r.MinHitStep = 1, 1, 0.123, cfg.Steps-1
		r.SteadyDBLoad, r.SteadyPeakDBLoad, r.PeakDBLoad, r.PeakDBStep = 195, 3000, 3000, cfg.Steps-1
		r.Backfills, r.Swept = 360000, int64(cfg.Keys)
		r.Steps = make([]sim.Step, cfg.Steps)
		for i := range r.Steps {
			r.Steps[i] = sim.Step{Reads: 3000, Hits: 3000 - int64(i%2)*2999, Loads: 3000}
			r.Total.Reads += 3000
		}
		r.Total.Stale, r.Total.FallbackHits = r.Total.Reads, r.Total.Reads
		return r
	}
	switch {
	case cfg.Kill != "":
		for _, k := range sim.KillModes {
			res.Modes = append(res.Modes, mode(sim.ModeResult{Mode: sim.ModeRing, Name: k.String(), KillMode: k}))
		}
	case cfg.ExpiryWave > 0:
		for _, l := range sim.Loadings {
			res.Modes = append(res.Modes, mode(sim.ModeResult{Mode: sim.ModeRing, Name: l.String(), Loading: l}))
		}
	default:
		for _, m := range cfg.Modes {
			res.Modes = append(res.Modes, mode(sim.ModeResult{Mode: m, Name: m.String()}))
		}
	}
	return res
}

// TestSimulateWidth checks that the default run's text report, its tables
// and sentences, fits in a terminal of 100 columns: it was 153 wide.
func TestSimulateWidth(t *testing.T) {
	var out bytes.Buffer
	writeSimulation(&out, wideResult(sim.DefaultConfig()), &simFlags{every: 5, seed: 1})
	for line := range strings.Lines(out.String()) {
		if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > 100 {
			t.Errorf("a line of %d columns, want at most 100:\n%s", n, line)
		}
	}
	for _, want := range []string{"step   time", "dual-ring+sweep", "← reshard", "← dual-ring window over", "← sweep window over", "stale reads\n", "peak DB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// colorDistance returns how far apart two #rrggbb colours look: their
// distance in CIELAB (ΔE*76), where about 2 is just noticeable. The
// palette's orange and vermilion, which read as one colour as thin lines,
// are 33 apart; its blue and bluish green 70.
func colorDistance(t *testing.T, a, b string) float64 {
	t.Helper()
	lab := func(hex string) (l, a, b float64) {
		var rgb [3]uint8
		if _, err := fmt.Sscanf(hex, "#%02x%02x%02x", &rgb[0], &rgb[1], &rgb[2]); err != nil {
			t.Fatalf("colour %q: %v", hex, err)
		}
		var lin [3]float64 // sRGB, linear
		for i, c := range rgb {
			v := float64(c) / 255
			if lin[i] = v / 12.92; v > 0.04045 {
				lin[i] = math.Pow((v+0.055)/1.055, 2.4)
			}
		}
		f := func(t float64) float64 { // of XYZ over the D65 white
			if t > 216.0/24389 {
				return math.Cbrt(t)
			}
			return (24389.0/27*t + 16) / 116
		}
		x := f((0.4124*lin[0] + 0.3576*lin[1] + 0.1805*lin[2]) / 0.95047)
		y := f(0.2126*lin[0] + 0.7152*lin[1] + 0.0722*lin[2])
		z := f((0.0193*lin[0] + 0.1192*lin[1] + 0.9505*lin[2]) / 1.08883)
		return 116*y - 16, 500 * (x - y), 200 * (y - z)
	}
	l1, a1, b1 := lab(a)
	l2, a2, b2 := lab(b)
	return math.Sqrt((l1-l2)*(l1-l2) + (a1-a2)*(a1-a2) + (b1-b2)*(b1-b2))
}

// TestSimulateSVGLegible checks the charts of the default settings, of a
// wave and of a kill: every series has a colour of its own, one that does
// not look like another's (colorDistance 40 at least), and the title
// and its description fit the chart's width, by an estimate of 0.6 em a
// character (wider than a sans-serif's mean), above the first panel.
func TestSimulateSVGLegible(t *testing.T) {
	wave, kill := sim.DefaultConfig(), sim.DefaultConfig()
	wave.ExpiryWave, wave.Processes, wave.LoadTime = 50, 8, 100*time.Millisecond
	kill.Kill, kill.ReturnAt = "d", 50
	for name, cfg := range map[string]sim.Config{"resharding": sim.DefaultConfig(), "expiry wave": wave, "kill": kill} {
		res := wideResult(cfg)
		var chart bytes.Buffer
		if err := writeSVG(&chart, res, describe(res, &simFlags{seed: 1})); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			ViewBox string `xml:"viewBox,attr"`
			Text    []struct {
				X      float64 `xml:"x,attr"`
				Y      float64 `xml:"y,attr"`
				Size   int     `xml:"font-size,attr"`
				Weight string  `xml:"font-weight,attr"`
				Text   string  `xml:",chardata"`
			} `xml:"text"`
			Panels []struct {
				ID     string `xml:"id,attr"`
				Series []struct {
					Mode   string `xml:"data-mode,attr"`
					Stroke string `xml:"stroke,attr"`
				} `xml:"polyline"`
				Text []struct {
					Y float64 `xml:"y,attr"`
				} `xml:"text"`
			} `xml:"g"`
		}
		if err := xml.Unmarshal(chart.Bytes(), &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var width float64
		if _, err := fmt.Sscanf(doc.ViewBox, "0 0 %g", &width); err != nil {
			t.Fatalf("%s: viewBox %q: %v", name, doc.ViewBox, err)
		}
		for _, pn := range doc.Panels {
			if pn.ID == "legend" {
				continue
			}
			if len(pn.Series) != len(res.Modes) {
				t.Errorf("%s: panel %s: %d series, want %d", name, pn.ID, len(pn.Series), len(res.Modes))
			}
			for i, a := range pn.Series {
				for _, b := range pn.Series[:i] {
					if d := colorDistance(t, a.Stroke, b.Stroke); d < 40 {
						t.Errorf("%s: panel %s: %s (%s) and %s (%s) are %.0f apart, want 40 at least", name, pn.ID, a.Mode, a.Stroke, b.Mode, b.Stroke, d)
					}
				}
			}
		}
		if len(doc.Text) < 3 || len(doc.Panels) == 0 || len(doc.Panels[0].Text) == 0 {
			t.Fatalf("%s: the title's lines %d, panels %d", name, len(doc.Text), len(doc.Panels))
		}
		// The <text> directly under <svg>, but the axis's name (the last): the title.
		title, panelTitle := doc.Text[:len(doc.Text)-1], doc.Panels[0].Text[0]
		for i, l := range title {
			if end := l.X + 0.6*float64(l.Size)*float64(utf8.RuneCountInString(l.Text)); end > width {
				t.Errorf("%s: the title's line %q ends at about %.0f, past the chart's width %g", name, l.Text, end, width)
			}
			if i > 0 && l.Y < title[i-1].Y+float64(l.Size) {
				t.Errorf("%s: the title's line %q overlaps the one above", name, l.Text)
			}
		}
		if last := title[len(title)-1]; last.Y > panelTitle.Y-12 {
			t.Errorf("%s: the title's last line, at %g, overlaps the first panel's title at %g", name, last.Y, panelTitle.Y)
		}
	}
}
