package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Summary prints what was checked and what was found, in a few lines.
func (r *Result) Summary() string {
	var b strings.Builder
	kinds := make([]string, 0, len(r.Ops))
	for k := range r.Ops {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "%d operations (", r.Total())
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, r.Ops[Kind(k)])
	}
	fmt.Fprintf(&b, "); %d reads with a value, %d misses, %d failed or cut short; %d keys, %d counters; %d faults (%d restarts)\n",
		r.Reads, r.Misses, r.Failed, r.Keys, r.Counters, r.Faults, r.Wipes)
	if len(r.Violations) == 0 {
		b.WriteString("no violation\n")
		return b.String()
	}
	counts := make(map[Rule]int)
	var rules []string
	for _, v := range r.Violations {
		if counts[v.Rule] == 0 {
			rules = append(rules, string(v.Rule))
		}
		counts[v.Rule]++
	}
	sort.Strings(rules)
	fmt.Fprintf(&b, "%d violations:", len(r.Violations))
	for i, rule := range rules {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d %s", counts[Rule(rule)], rule)
	}
	b.WriteString("\n")
	return b.String()
}

// Report prints the summary, then up to max violations with the operations
// involved, the other writes and deletes of the key meanwhile, and the
// faults under way; times count from the run's start.
func Report(h *History, r *Result, max int) string {
	var b strings.Builder
	if h.Info.Backend != "" {
		fmt.Fprintf(&b, "run: %s, seed %d\n", h.Info.Backend, h.Info.Seed)
	}
	if h.Info.MigrationStart != 0 {
		fmt.Fprintf(&b, "migration window: %s to %s\n", rel(h, h.Info.MigrationStart), rel(h, h.Info.MigrationEnd))
	}
	b.WriteString(r.Summary())
	byKey := opsByKey(h)
	for i, v := range r.Violations {
		if i == max {
			fmt.Fprintf(&b, "... and %d more\n", len(r.Violations)-max)
			break
		}
		b.WriteString("\n")
		b.WriteString(Describe(h, v, byKey[v.Key]))
	}
	return b.String()
}

// Describe prints one violation: its rule and key, the read, the write of
// the value read and the witness, then the key's other writes and deletes
// invoked between the write and the read (from keyOps, the key's
// operations in order of invocation), the reads of the same value under way
// when the witness began, and the faults under way.
func Describe(h *History, v Violation, keyOps []*Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: key %s", v.Rule, v.Key)
	if v.Detail != "" {
		fmt.Fprintf(&b, ": %s", v.Detail)
	}
	b.WriteString("\n")
	line := func(label string, o *Op) {
		if o != nil {
			fmt.Fprintf(&b, "  %-8s %s\n", label, OpLine(h, o, v.Key))
		}
	}
	line("read", v.Read)
	line("written", v.Write)
	switch {
	case v.Witness == nil:
	case v.Write != nil:
		line("then", v.Witness)
		fmt.Fprintf(&b, "  (the %s began %s after the write ended, and ended %s before the read began)\n",
			v.Witness.Kind, ms(v.Witness.Inv-v.Write.Comp), ms(v.Read.Inv-v.Witness.Comp))
	default:
		line("after", v.Witness)
	}
	lo, hi := v.Read.Inv, v.Read.Comp
	if v.Write != nil {
		lo = v.Write.Inv
	}
	if v.Witness != nil {
		lo = min(lo, v.Witness.Inv)
	}
	var others []*Op
	for _, o := range keyOps {
		if sameOp(o, v.Read) || sameOp(o, v.Write) || sameOp(o, v.Witness) || o.Inv > hi || o.Inv < lo {
			continue
		}
		if o.writes() {
			others = append(others, o)
		}
	}
	// The reads of the same value under way when the witness began: one
	// of them may have copied it back (a backfill).
	for _, o := range keyOps {
		if v.Write == nil || v.Witness == nil || sameOp(o, v.Read) || o.Inv > v.Witness.Inv || o.Comp < v.Witness.Inv {
			continue
		}
		if readValue(o, v.Key) == v.Write.Value {
			others = append(others, o)
		}
	}
	sort.SliceStable(others, func(i, j int) bool { return others[i].Inv < others[j].Inv })
	if len(others) > 0 {
		b.WriteString("  meanwhile on the key:\n")
		for i, o := range others {
			if i == 12 {
				fmt.Fprintf(&b, "    ... and %d more\n", len(others)-12)
				break
			}
			fmt.Fprintf(&b, "    %s\n", OpLine(h, o, v.Key))
		}
	}
	for _, f := range h.Faults {
		if f.Start <= hi && f.End >= lo {
			label := "fault: " + string(f.Kind)
			if f.Event() {
				label = string(f.Kind) // an event, not a fault
			}
			fmt.Fprintf(&b, "  %s %s %s from %s to %s\n", label, f.Target, f.Detail, rel(h, f.Start), rel(h, f.End))
		}
	}
	return b.String()
}

// readValue returns the value o read for key, "" for none.
func readValue(o *Op, key string) string {
	v, _, _ := readOf(o, key)
	return v
}

// sameOp reports whether a and b are one operation, or shares of one
// (keyShare).
func sameOp(a, b *Op) bool { return a != nil && b != nil && a.ID == b.ID }

// OpLine prints one operation on one line: id, kind, key, times and outcome.
// For a GetMulti it shows key's share.
func OpLine(h *History, o *Op, key string) string {
	end := "never"
	if o.Comp != 0 {
		end = rel(h, o.Comp)
	}
	k := o.Key()
	if len(o.Keys) > 1 {
		k = fmt.Sprintf("%s (of %d)", key, len(o.Keys))
		o = keyShare(o, key)
	}
	var what string
	switch {
	case o.Kind.writesValue() && o.Status != NotStored:
		what = "wrote " + strconv.Quote(o.Value)
	case o.Kind.writesValue():
		what = "would write " + strconv.Quote(o.Value)
	case o.Kind.singleRead() || o.Kind.multiRead():
		if v, hit, checked := readOf(o, key); hit {
			what = "read " + strconv.Quote(v)
		} else if checked && o.Kind.multiRead() {
			what = "missed it"
		}
	case o.Kind.counts():
		if o.Status == OK {
			what = "-> " + o.Result
		}
	}
	st := string(o.Status)
	switch o.Status {
	case Pending:
		st = "never completed (process killed)"
	case Failed:
		st = "failed: " + o.Err
	}
	return strings.TrimSpace(fmt.Sprintf("%-14s %-9s %-6s [%s, %s]  %s %s", o.ID, o.Kind, k, rel(h, o.Inv), end, what, st))
}

// SaveReport writes Report (all violations) to dir/name.txt and an HTML
// visualisation of the first value violation to dir/name.html, returning the
// paths written.
func SaveReport(dir, name string, h *History, r *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	txt := filepath.Join(dir, name+".txt")
	if err := os.WriteFile(txt, []byte(Report(h, r, len(r.Violations))), 0o644); err != nil {
		return nil, err
	}
	paths := []string{txt}
	for _, v := range r.Violations {
		if v.Write == nil {
			continue
		}
		html := filepath.Join(dir, name+".html")
		f, err := os.Create(html)
		if err != nil {
			return paths, err
		}
		err = Visualize(f, h, v)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, err
		}
		paths = append(paths, html)
		break
	}
	return paths, nil
}

func opsByKey(h *History) map[string][]*Op {
	m := make(map[string][]*Op)
	for _, o := range h.Ops {
		for _, k := range o.Keys {
			m[k] = append(m[k], o)
		}
	}
	return m
}

// rel prints t as seconds since the run's start (or the first operation).
func rel(h *History, t int64) string {
	start := h.Info.Start
	if start == 0 && len(h.Ops) > 0 {
		start = h.Ops[0].Inv
	}
	return fmt.Sprintf("+%.6fs", float64(t-start)/1e9)
}

func ms(d int64) string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
