package client

import (
	"context"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	forEachCluster(t, 3, func(t *testing.T, cl *cluster) {
		c := cl.client(t, Options{})
		ctx := context.Background()
		if err := c.Set(ctx, "k", []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		v, err := c.Get(ctx, "k")
		if err != nil || string(v) != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
		if h := cl.holders(t, "k"); len(h) != 1 || h[0] != c.Locate("k").Addr {
			t.Fatalf("holders %v, Locate %v", h, c.Locate("k"))
		}
	})
}
