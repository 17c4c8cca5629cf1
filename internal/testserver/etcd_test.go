package testserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// etcdKV puts (value != "") or gets a key through etcd's JSON gateway, and
// returns the JSON answer.
func etcdKV(t *testing.T, addr, key, value string) string {
	t.Helper()
	k := base64.StdEncoding.EncodeToString([]byte(key))
	path, body := "/v3/kv/range", fmt.Sprintf(`{"key": %q}`, k)
	if value != "" {
		path, body = "/v3/kv/put", fmt.Sprintf(`{"key": %q, "value": %q}`, k, base64.StdEncoding.EncodeToString([]byte(value)))
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post("http://"+addr+path, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("etcd %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s %s %v", path, resp.Status, out, err)
	}
	return string(out)
}

func TestEtcd(t *testing.T) {
	s := Etcd(t)
	etcdKV(t, s.Addr, "/k", "v1")
	want := base64.StdEncoding.EncodeToString([]byte("v1"))
	if got := etcdKV(t, s.Addr, "/k", ""); !strings.Contains(got, want) {
		t.Fatalf("range /k = %s, want the value %s", got, want)
	}
	s.Stop()
	s.Stop() // idempotent
	refused(t, s.Addr)
	s.Restart()
	// Unlike the caches, etcd keeps its data across a restart.
	if got := etcdKV(t, s.Addr, "/k", ""); !strings.Contains(got, want) {
		t.Fatalf("range /k after Restart = %s, want the value %s", got, want)
	}
	// Two members are two clusters, each on its own ports.
	other := Etcd(t)
	if other.Addr == s.Addr {
		t.Fatalf("two etcds on %s", s.Addr)
	}
	if got := etcdKV(t, other.Addr, "/k", ""); strings.Contains(got, want) {
		t.Fatalf("range /k on another etcd = %s, want no value", got)
	}
}

func TestEtcdMissingBinary(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			t.Setenv("PATH", t.TempDir())
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				etcdBinary(r)
			}()
			<-done
			if ci == "true" && !r.failed || ci != "true" && !r.skipped {
				t.Fatalf("CI=%q: skipped=%v failed=%v", ci, r.skipped, r.failed)
			}
			if !strings.Contains(r.msg, "etcd-server") {
				t.Fatalf("message %q does not name the package to install", r.msg)
			}
		})
	}
}
