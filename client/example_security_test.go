package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log"
	"os"

	"github.com/shardcache/shardcache/client"
	"github.com/shardcache/shardcache/ring"
)

// A fleet behind a password and TLS: the same fields as go-redis's, applied
// to every node, and the errors that say what was refused.
func ExampleOptions_tls() {
	caPEM, err := os.ReadFile("/etc/cache/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := client.New(client.Options{
		Nodes: []ring.Node{
			{Name: "a", Addr: "cache-a.internal:6380"},
			{Name: "b", Addr: "cache-b.internal:6380"},
		},
		Username:  "app",
		Password:  os.Getenv("CACHE_PASSWORD"),
		TLSConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Get(context.Background(), "user:42")
	switch {
	case errors.Is(err, client.ErrAuth):
		log.Fatalf("check the password and the CA: %v", err) // the error never holds the password
	case errors.Is(err, client.ErrNoPerm):
		log.Fatalf("the ACL user may not read this key: %v", err)
	}
}
