package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shardcache/shardcache/cmd/shardcache/internal/sim"
)

// The chart's geometry, in SVG user units (pixels).
const (
	svgWidth   = 880
	svgLeft    = 70  // room for the y labels
	svgRight   = 170 // room for the legend
	panelH     = 190 // height of a panel's plot area
	hitTop     = 78  // top of the hit-rate panel
	loadTop    = hitTop + panelH + 60
	svgHeight  = loadTop + panelH + 56
	plotWidth  = svgWidth - svgLeft - svgRight
	panelTitle = 10 // gap between a panel's title and its plot
	svgMargin  = 10 // room kept right of the title's lines
)

// charWidth estimates a character's mean width in the chart's sans-serif,
// in ems: Helvetica's and Arial's run from 0.28 (i) to 0.67 (capitals), a
// digit 0.56; a title wrapped at this estimate fits the chart.
const charWidth = 0.6

// modeColors are the series' colours, by mode (colour-blind safe, from
// Okabe and Ito's palette). Not its orange next to its vermilion: as thin
// lines the two read as one colour.
var modeColors = map[sim.Mode]string{
	sim.ModeModN:     "#d55e00",
	sim.ModeRing:     "#009e73",
	sim.ModeDualRing: "#0072b2",
	sim.ModeSweep:    "#cc79a7",
}

// loadingColors are the series' colours in an expiry wave, by loading.
var loadingColors = map[sim.Loading]string{
	sim.LoadPlain:    "#d55e00",
	sim.LoadLease:    "#009e73",
	sim.LoadSWR:      "#0072b2",
	sim.LoadSWRLease: "#cc79a7",
}

// limitColor draws the load limit: grey, as no series is.
const limitColor = "#555"

// killColors are the series' colours in a kill run, by kill mode.
var killColors = map[sim.KillMode]string{
	sim.KillFailOpen: "#d55e00",
	sim.KillGutter:   "#0072b2",
	sim.KillReplicas: "#cc79a7",
}

// seriesStyle returns the colour and dash of m's series.
func seriesStyle(res *sim.Result, m sim.ModeResult) (color, dash string) {
	if res.Config.Kill != "" {
		return killColors[m.KillMode], ""
	}
	if res.Config.ExpiryWave > 0 {
		if m.Loading == sim.LoadSWRLease { // it matches swr step for step
			return loadingColors[m.Loading], ` stroke-dasharray="6 4"`
		}
		return loadingColors[m.Loading], ""
	}
	return modeColors[m.Mode], modeDash[m.Mode]
}

// modeDash dashes the series a mode draws over another's: the sweep's hit
// rate and load can match the dual-ring's step for step.
var modeDash = map[sim.Mode]string{sim.ModeSweep: ` stroke-dasharray="6 4"`}

// writeSVG draws the run as two panels, the hit rate and the database load
// per step, one line per mode, with the reshard marked by a dashed line and
// the end of the dual-ring window by a dotted one. title is printed on top,
// each of its lines wrapped to the chart's width.
func writeSVG(w io.Writer, res *sim.Result, title string) error {
	cfg := &res.Config
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }

	maxLoad := int64(1)
	for _, m := range res.Modes {
		for _, s := range m.Steps {
			maxLoad = max(maxLoad, s.DBLoad())
		}
	}
	loadTicks := niceTicks(float64(maxLoad))
	loadMax := loadTicks[len(loadTicks)-1]

	x := func(step int) float64 {
		return svgLeft + float64(step)*plotWidth/float64(max(cfg.Steps-1, 1))
	}
	// The title's lines, each wrapped to the chart's width: the panels and
	// the legend move down by the lines past two.
	type titleLine struct {
		text, weight string
		size         int
	}
	var lines []titleLine
	for i, line := range strings.Split(title, "\n") {
		size, weight := 12, "normal"
		if i == 0 {
			size, weight = 15, "bold"
		}
		if i == 0 && cfg.ExpiryWave > 0 {
			line = "Expiry wave: " + line
		} else if i == 0 && cfg.Kill != "" {
			line = "A node's death: " + line
		} else if i == 0 {
			line = "Resharding " + line
		}
		for _, l := range wrap(line, int((svgWidth-svgLeft-svgMargin)/(charWidth*float64(size)))) {
			lines = append(lines, titleLine{l, weight, size})
		}
	}
	dy := 18 * max(len(lines)-2, 0)
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight+dy, svgWidth, svgHeight+dy)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	for i, l := range lines {
		p(`<text x="%d" y="%d" font-size="%d" font-weight="%s">%s</text>`+"\n", svgLeft, 22+18*i, l.size, l.weight, esc(l.text))
	}

	type panel struct {
		id, title string
		top       float64
		ticks     []float64
		max       float64
		label     func(float64) string
		value     func(sim.Step) float64
	}
	panels := []panel{
		{"hit", "Hit rate (%)", float64(hitTop + dy), []float64{0, 20, 40, 60, 80, 100}, 100,
			func(v float64) string { return fmt.Sprintf("%g%%", v) },
			func(s sim.Step) float64 { return 100 * s.HitRate() }},
		{"load", "Database load (loads + writes per step)", float64(loadTop + dy), loadTicks, loadMax,
			func(v float64) string { return fmtTick(v, loadTicks[1]) },
			func(s sim.Step) float64 { return float64(s.DBLoad()) }},
	}
	unit, unitName := time.Minute, "minutes"
	if span := time.Duration(cfg.Steps) * cfg.Step; span < 5*time.Minute {
		unit, unitName = time.Second, "seconds"
	}
	xTicks := niceTicks(float64(time.Duration(cfg.Steps-1)*cfg.Step) / float64(unit))
	end := windowEnd(cfg)

	for _, pn := range panels {
		y := func(v float64) float64 { return pn.top + panelH - v*panelH/pn.max }
		p(`<g id="%s">`+"\n", pn.id)
		p(`<text x="%d" y="%.1f" font-weight="bold">%s</text>`+"\n", svgLeft, pn.top-panelTitle, esc(pn.title))
		for _, t := range pn.ticks {
			p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", svgLeft, y(t), svgLeft+plotWidth, y(t))
			p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", svgLeft-6, y(t)+4, pn.label(t))
		}
		// Time ticks: multiples of the tick from the reshard on both sides.
		reshardAt := float64(time.Duration(cfg.ReshardAt)*cfg.Step) / float64(unit)
		span := float64(time.Duration(cfg.Steps-1)*cfg.Step) / float64(unit)
		tick := xTicks[1] - xTicks[0]
		for k := -int(math.Floor(reshardAt / tick)); float64(k)*tick <= span-reshardAt+1e-9; k++ {
			t := float64(k) * tick
			xt := svgLeft + (t+reshardAt)*plotWidth/span
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", xt, pn.top+panelH, xt, pn.top+panelH+4)
			p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xt, pn.top+panelH+17, fmtTick(t, tick))
		}
		p(`<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", svgLeft, pn.top, plotWidth, panelH)
		mainLine := "reshard"
		if cfg.Kill != "" {
			mainLine = "kill"
		}
		p(`<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="6 4"/>`+"\n",
			mainLine, x(cfg.ReshardAt), pn.top, x(cfg.ReshardAt), pn.top+panelH)
		// Labels where the lines are not: low on the hit rate, high on the load.
		labelY := pn.top + 12
		if pn.id == "hit" {
			labelY = pn.top + panelH - 6
		}
		mark := "reshard"
		switch {
		case cfg.ExpiryWave > 0:
			mark = "the wave expires"
		case cfg.Kill != "":
			mark = cfg.Kill + " dies"
		}
		p(`<text x="%.1f" y="%.1f" font-size="11">%s</text>`+"\n", x(cfg.ReshardAt)+4, labelY, esc(mark))
		if cfg.Kill != "" && cfg.ReturnAt > 0 {
			p(`<line class="return" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#009e73" stroke-width="1.4" stroke-dasharray="2 3"/>`+"\n",
				x(cfg.ReturnAt), pn.top, x(cfg.ReturnAt), pn.top+panelH)
			p(`<text x="%.1f" y="%.1f" font-size="11" fill="#009e73">%s returns, empty</text>`+"\n", x(cfg.ReturnAt)+4, labelY, esc(cfg.Kill))
		}
		if end < cfg.Steps && hasMode(res, sim.ModeDualRing) {
			p(`<line class="window-end" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#0072b2" stroke-dasharray="2 3"/>`+"\n",
				x(end), pn.top, x(end), pn.top+panelH)
			p(`<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">dual-ring window over</text>`+"\n", x(end)-4, labelY)
		}
		if se := sweepWindowEnd(cfg); se < cfg.Steps && hasMode(res, sim.ModeSweep) {
			p(`<line class="window-end" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#cc79a7" stroke-dasharray="2 3"/>`+"\n",
				x(se), pn.top, x(se), pn.top+panelH)
			p(`<text x="%.1f" y="%.1f" font-size="11">sweep window over</text>`+"\n", x(se)+4, labelY+14)
		}
		if pn.id == "load" && cfg.LoadLimit > 0 {
			// The guard caps loads; the writes come on top of it.
			yl := y(min(float64(loadBudget(cfg)), pn.max))
			p(`<line class="load-limit" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.4" stroke-dasharray="8 3"/>`+"\n",
				svgLeft, yl, svgLeft+plotWidth, yl, limitColor)
			p(`<text x="%d" y="%.1f" font-size="11" text-anchor="end" fill="%s">load limit: %s per step</text>`+"\n",
				svgLeft+plotWidth-4, yl-4, limitColor, count(loadBudget(cfg), "load", ""))
		}
		for _, m := range res.Modes {
			color, dash := seriesStyle(res, m)
			p(`<polyline class="series" data-panel="%s" data-mode="%s" fill="none" stroke="%s"%s stroke-width="1.6" stroke-linejoin="round" points="`,
				pn.id, m.Name, color, dash)
			for i, s := range m.Steps {
				if i > 0 {
					p(" ")
				}
				p("%.1f,%.1f", x(i), y(min(pn.value(s), pn.max)))
			}
			p(`"/>` + "\n")
		}
		p("</g>\n")
	}
	since := "the reshard"
	switch {
	case cfg.ExpiryWave > 0:
		since = "the wave"
	case cfg.Kill != "":
		since = cfg.Kill + "'s death"
	}
	p(`<text x="%d" y="%d" text-anchor="middle">%s since %s (one step: %v)</text>`+"\n",
		svgLeft+plotWidth/2, svgHeight+dy-14, unitName, since, cfg.Step)

	// Legend, with each mode's low and peak.
	lx, ly := svgLeft+plotWidth+16, hitTop+dy+8
	p(`<g id="legend">` + "\n")
	for i, m := range res.Modes {
		yy := ly + 54*i
		color, dash := seriesStyle(res, m)
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"%s stroke-width="3"/>`+"\n", lx, yy, lx+22, yy, color, dash)
		p(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", lx+28, yy+4, esc(m.Name))
		if cfg.Kill != "" {
			// The outage's: its hit rate against steady, its peak.
			p(`<text x="%d" y="%d" font-size="11">outage: hit %s</text>`+"\n", lx+28, yy+20, pct(m.Kill.OutageHitRate/m.SteadyHitRate, 1))
			p(`<text x="%d" y="%d" font-size="11">of steady, peak ×%.1f</text>`+"\n", lx+28, yy+34, float64(m.Kill.OutagePeakDBLoad)/m.SteadyDBLoad)
			if m.KillMode == sim.KillGutter {
				p(`<text x="%d" y="%d" font-size="11">%s, TTL %v</text>`+"\n", lx+28, yy+48, count(cfg.Gutter, "node", ""), cfg.GutterTTL)
			}
			if m.KillMode == sim.KillReplicas {
				p(`<text x="%d" y="%d" font-size="11">R=%d, FailOpen</text>`+"\n", lx+28, yy+48, cfg.Replicas)
			}
			continue
		}
		p(`<text x="%d" y="%d" font-size="11">min hit %s</text>`+"\n", lx+28, yy+20, pct(m.MinHitRate, 1))
		if r := peakVsPlain(res, m); r > 0 {
			p(`<text x="%d" y="%d" font-size="11">peak DB ×%.2f of plain</text>`+"\n", lx+28, yy+34, r)
		} else {
			p(`<text x="%d" y="%d" font-size="11">peak DB ×%.1f</text>`+"\n", lx+28, yy+34, float64(m.PeakDBLoad)/m.SteadyDBLoad)
		}
		if cfg.LoadLimit > 0 {
			p(`<text x="%d" y="%d" font-size="11">throttled %d</text>`+"\n", lx+28, yy+48, m.Total.Throttled)
		}
	}
	p("</g>\n</svg>\n")
	return bw.Flush()
}

func hasMode(res *sim.Result, mode sim.Mode) bool {
	for _, m := range res.Modes {
		if m.Mode == mode {
			return true
		}
	}
	return false
}

// niceTicks returns ticks from 0 to at least hi, 1, 2 or 5 times a power of
// ten apart, about five of them.
func niceTicks(hi float64) []float64 {
	if hi <= 0 {
		hi = 1
	}
	exp := int(math.Floor(math.Log10(hi / 5)))
	mult := 10
	for _, m := range []int{1, 2, 5} {
		if hi/(float64(m)*math.Pow10(exp)) <= 6 {
			mult = m
			break
		}
	}
	// k·mult·10^exp, divided rather than multiplied by a power of ten when
	// exp < 0, is the float64 nearest the decimal: 0.6, not 0.6000000000000001.
	tick := func(k int) float64 {
		if exp < 0 {
			return float64(k*mult) / math.Pow10(-exp)
		}
		return float64(k*mult) * math.Pow10(exp)
	}
	var ticks []float64
	for k := 0; ; k++ {
		ticks = append(ticks, tick(k))
		if tick(k) >= hi-1e-9 {
			return ticks
		}
	}
}

// fmtTick formats a tick value with as many decimals as the spacing of the
// ticks needs.
func fmtTick(v, spacing float64) string {
	decimals := 0
	for scaled := spacing; decimals < 6 && math.Abs(scaled-math.Round(scaled)) > 1e-9; decimals++ {
		scaled *= 10
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
