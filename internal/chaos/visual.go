package chaos

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// ErrNoVisual means a violation that Visualize cannot draw: a counter's.
var ErrNoVisual = errors.New("chaos: only a value violation can be visualised")

// The sub-history Visualize hands porcupine is the violation's key: the
// read, the write of its value, the witness, and the key's writes and
// deletes invoked between that write's start and the read's end. Other reads are left out,
// so the sub-history is linearizable exactly when the rule holds: porcupine
// checks linearizability, which is stronger than the cache's rule (two
// sequential reads may see two concurrent writes in either order, and
// after a restart an older copy on the other owner), so the whole history
// is not for it; on the sub-history it draws the longest linearizable
// prefix and where the read cannot fit.

// regInput and regOutput are a register operation's call and answer.
type regInput struct {
	kind  Kind
	value string
	maybe bool // failed, cut short or a load: may or may not take effect
}

type regOutput struct {
	hit   bool
	value string
}

const absent = "(absent)"

// maxSub bounds the operations of a visualised sub-history.
const maxSub = 40

// registerModel is a key whose state is the set of values it may hold (a
// maybe-write adds one, a write replaces them all, a read that returns one
// narrows them to it, a miss says nothing), encoded as a sorted,
// newline-joined string so that states compare with ==.
var registerModel = porcupine.Model{
	Init: func() any { return absent },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(regInput), output.(regOutput)
		set := strings.Split(state.(string), "\n")
		switch {
		case in.kind.writesValue():
			if in.maybe {
				return true, join(append(set, in.value))
			}
			return true, in.value
		case in.kind.deletes():
			if in.maybe {
				return true, join(append(set, absent))
			}
			return true, absent
		default: // a read
			if !out.hit {
				return true, state
			}
			if slices.Contains(set, out.value) {
				return true, out.value
			}
			return false, state
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		maybe := ""
		if in.maybe {
			maybe = "?"
		}
		switch {
		case in.kind.writesValue():
			return fmt.Sprintf("%s%s(%q)", in.kind, maybe, in.value)
		case in.kind.deletes():
			return string(in.kind) + maybe + "()"
		}
		if !out.hit {
			return string(in.kind) + "() -> miss"
		}
		return fmt.Sprintf("%s() -> %q", in.kind, out.value)
	},
	DescribeState: func(state any) string { return "{" + strings.ReplaceAll(state.(string), "\n", ", ") + "}" },
	DescribeOperationMetadata: func(info any) string {
		s, _ := info.(string)
		return s
	},
}

func join(set []string) string {
	slices.Sort(set)
	return strings.Join(slices.Compact(set), "\n")
}

// Visualize writes porcupine's HTML visualisation of a value violation's
// sub-history to w, with the faults under way as annotations.
func Visualize(w io.Writer, h *History, v Violation) error {
	if v.Write == nil {
		return ErrNoVisual
	}
	lo, hi := v.Write.Inv, v.Read.Comp
	sub := []*Op{v.Write, v.Read}
	if v.Witness != nil {
		sub = append(sub, v.Witness)
	}
	// The other writes and deletes invoked meanwhile, at most maxSub of
	// them (each failed one doubles porcupine's search): they cannot make
	// the sub-history linearizable, only show what else went on.
	for _, o := range h.Ops {
		if len(sub) == maxSub || o.Inv > hi {
			break
		}
		if o.Inv < lo || !slices.Contains(o.Keys, v.Key) || slices.ContainsFunc(sub, func(x *Op) bool { return sameOp(x, o) }) {
			continue
		}
		if (o.Kind.writesValue() || o.Kind.deletes()) && o.Status != NotStored {
			sub = append(sub, keyShare(o, v.Key))
		}
	}
	base := lo - int64(time.Millisecond)
	clients := make(map[[3]int]int)
	var ops []porcupine.Operation
	for _, o := range sub {
		c := [3]int{o.ID.Proc, o.ID.Incarnation, o.ID.Goroutine}
		if _, ok := clients[c]; !ok {
			clients[c] = len(clients)
		}
		in := regInput{kind: o.Kind, value: o.Value, maybe: o.Status != OK}
		out := regOutput{}
		if o.Kind.singleRead() || o.Kind.multiRead() {
			val, hit, _ := readOf(o, v.Key)
			out = regOutput{hit: hit, value: val}
			in.kind = Get
		}
		end := o.End()
		if end == Never || end > hi {
			end = hi + int64(time.Millisecond)
		}
		ops = append(ops, porcupine.Operation{
			ClientId: clients[c], Input: in, Output: out,
			Call: o.Inv - base, Return: end - base,
			Metadata: OpLine(h, o, v.Key),
		})
	}
	_, info := porcupine.CheckOperationsVerbose(registerModel, ops, 10*time.Second)
	var notes []porcupine.Annotation
	for _, f := range h.Faults {
		if f.Start <= hi && f.End >= lo {
			tag := "faults"
			if f.Event() {
				tag = "events"
			}
			notes = append(notes, porcupine.Annotation{
				Tag: tag, Start: max(f.Start, lo) - base, End: min(f.End, hi) - base,
				Description: string(f.Kind) + " " + f.Target,
				Details:     f.Detail + " " + rel(h, f.Start) + " to " + rel(h, f.End),
			})
		}
	}
	notes = append(notes, porcupine.Annotation{
		Tag: "violation", Start: v.Read.Inv - base, End: v.Read.Comp - base,
		Description:     string(v.Rule),
		Details:         "key " + v.Key + ": read " + v.Read.ID.String() + " returned " + strconv.Quote(v.Write.Value),
		BackgroundColor: "#f4b6b6",
	})
	info.AddAnnotations(notes)
	return porcupine.Visualize(registerModel, info, w)
}
