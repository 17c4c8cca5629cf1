package chaos_test

import (
	"fmt"
	"strings"

	"github.com/shardcache/shardcache/internal/chaos"
)

// A history of two processes in which a read returns a value deleted before
// it began: the checker reports it, naming the three operations. A run's
// Recorders write such lines as the calls go, with the clock's times; these
// are written by hand, in milliseconds.
func ExampleCheck() {
	ms := func(n int64) int64 { return n * 1e6 }
	lines := []string{
		fmt.Sprintf("i\t1\t0\t0\t1\t%d\tset\tk07\tp1.0.g0.s1", ms(0)),
		fmt.Sprintf("r\t1\t0\t0\t1\t%d\tok\t\t\t", ms(2)),
		fmt.Sprintf("i\t1\t0\t0\t2\t%d\tdelete\tk07\t", ms(5)),
		fmt.Sprintf("r\t1\t0\t0\t2\t%d\tok\t\t\t", ms(6)),
		fmt.Sprintf("i\t2\t0\t3\t1\t%d\tget\tk07\t", ms(9)),
		fmt.Sprintf("r\t2\t0\t3\t1\t%d\tok\t=p1.0.g0.s1\t\t", ms(10)),
	}
	h, err := chaos.Read(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	res := chaos.Check(h)
	fmt.Print(chaos.Report(h, res, 1))
	// Output:
	// 3 operations (delete 1, get 1, set 1); 1 reads with a value, 0 misses, 0 failed or cut short; 1 keys, 0 counters; 0 faults (0 restarts)
	// 1 violations: 1 deleted value read
	//
	// deleted value read: key k07
	//   read     p2.0 g3 #1     get       k07    [+0.009000s, +0.010000s]  read "p1.0.g0.s1" ok
	//   written  p1.0 g0 #1     set       k07    [+0.000000s, +0.002000s]  wrote "p1.0.g0.s1" ok
	//   then     p1.0 g0 #2     delete    k07    [+0.005000s, +0.006000s]   ok
	//   (the delete began 3.000ms after the write ended, and ended 3.000ms before the read began)
}
