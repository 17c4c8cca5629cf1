package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/shardcache/shardcache/ring"
	"github.com/shardcache/shardcache/topology"
)

// fromKindHelp documents --from-kind, for the help of plan and simulate.
const fromKindHelp = `--from-kind names the placement the --from nodes run today, so that moving
off it to our ring is planned before it is done:
  ring        our ring (the default), with --vnodes and --equalize
  ketama      twemproxy's "distribution: ketama" with "hash: md5" (or
              --from-hash fnv1a_64, twemproxy's default hash), or
              libmemcached's weighted ketama; a node's NAME is twemproxy's
              server name (without one: the host when the port is 11211,
              else HOST:PORT); --from-hash-tag is twemproxy's hash_tag
  modulo      hash(key) % N over the servers in the order given, each WEIGHT
              times: gomemcache's ServerList with the default --from-hash
              crc32, or a hand-written one (murmur3, murmur3-32, fnv1a,
              fnv1a-32); names play no part
  rendezvous  go-redis v9's Ring: NAME is the shard's name in RingOptions.Addrs
The --to nodes are always our ring.`

// fromKinds are the placements --from-kind names.
var fromKinds = func() []string {
	kinds := make([]string, len(topology.Kinds))
	for i, k := range topology.Kinds {
		kinds[i] = string(k)
	}
	return kinds
}()

// fromKindNames says what each kind is, for reports.
var fromKindNames = map[string]string{
	"ring":       "ring",
	"ketama":     "ketama (twemproxy, libmemcached)",
	"modulo":     "mod-N (gomemcache's ServerList, hash % N)",
	"rendezvous": "rendezvous (go-redis Ring)",
}

// fromKind is the placement of the --from nodes: the --from-kind,
// --from-hash and --from-hash-tag flags.
type fromKind struct {
	kind, hash, tag string
}

// addFromKindFlags defines the flags on fs.
func addFromKindFlags(fs *flag.FlagSet) *fromKind {
	k := &fromKind{}
	fs.StringVar(&k.kind, "from-kind", "ring", "the placement the --from nodes run: ring, ketama, modulo or rendezvous (see above)")
	fs.StringVar(&k.hash, "from-hash", "", "the hash of keys: with --from-kind modulo crc32 (the default), murmur3, murmur3-32, fnv1a or fnv1a-32; with ketama md5 (the default) or fnv1a_64")
	fs.StringVar(&k.tag, "from-hash-tag", "", "with --from-kind ketama or modulo, the two characters of a hash tag, such as {} (twemproxy's hash_tag)")
	return k
}

// check refuses an unknown kind and flags that do not apply to it; set
// names the flags given on the command line.
func (k *fromKind) check(set map[string]bool) error {
	switch {
	case !slices.Contains(fromKinds, k.kind):
		return fmt.Errorf("--from-kind %q: want one of %s", k.kind, strings.Join(fromKinds, ", "))
	case set["from-hash"] && k.kind != "modulo" && k.kind != "ketama":
		return fmt.Errorf("--from-hash: only for --from-kind modulo or ketama")
	case set["from-hash-tag"] && k.kind != "ketama" && k.kind != "modulo":
		return fmt.Errorf("--from-hash-tag: only for --from-kind ketama or modulo (%s has its own rule)", k.kind)
	}
	return nil
}

// placement builds the placement of nodes; vnodes and equalize (0: the
// classic ring) are the ring's.
func (k *fromKind) placement(nodes []ring.Node, vnodes int, equalize float64) (ring.Locator, error) {
	if k.kind == "ring" {
		return topology.Ring(nodes, vnodes, equalize)
	}
	return topology.Placement(topology.Kind(k.kind), k.hash, k.tag, nodes, vnodes)
}
