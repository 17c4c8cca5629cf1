package testserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Etcd starts a one-member etcd cluster (Debian's etcd-server, /usr/bin/etcd)
// on two free loopback ports, its client port at Addr, with its data in a
// directory of the test's. Unlike the caches, Restart keeps the data, as a
// restarted member does: a key written before is there after.
func Etcd(t testing.TB) *Server {
	t.Helper()
	bin := etcdBinary(t)
	dir := t.TempDir()
	return launch(t, bin, 2, func(p []int) []string {
		client := "http://127.0.0.1:" + strconv.Itoa(p[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(p[1])
		name := etcdName(p)
		return []string{
			"--name", name,
			"--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", name + "=" + peer, "--initial-cluster-state", "new",
			"--logger", "zap", "--log-level", "warn", "--log-outputs", "stderr",
		}
	}, probeEtcd)
}

// etcdName names the member after its ports, so that its member list
// tells this process from another etcd that won the race for the port.
func etcdName(ports []int) string {
	return fmt.Sprintf("shardcache_%d_%d", ports[0], ports[1])
}

// etcdBinary finds etcd as binary does, naming its Debian package, which
// is not called as the binary is, when it is missing.
func etcdBinary(t testing.TB) string {
	t.Helper()
	if path, err := exec.LookPath("etcd"); err == nil {
		return path
	}
	msg := "testserver: etcd not found; install it with `make deps` (apt-get install etcd-server)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// probeEtcd checks that the member answering the client port is this one
// (its name in the member list, through etcd's JSON gateway) and that it
// is healthy: it has a leader and serves reads.
func probeEtcd(ports []int, _ int) error {
	base := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	// No connection outlives the probe: the package's tests check that no
	// goroutine does.
	etcdHTTP := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	body, err := etcdGet(etcdHTTP.Post(base+"/v3/cluster/member/list", "application/json", bytes.NewReader([]byte("{}"))))
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"name":"`+etcdName(ports)+`"`)) {
		return fmt.Errorf("client port %d belongs to another etcd: %s", ports[0], body)
	}
	body, err = etcdGet(etcdHTTP.Get(base + "/health"))
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("not healthy yet: %s", body)
	}
	return nil
}

// etcdGet reads an answer's body, refusing a status other than 200.
func etcdGet(resp *http.Response, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, err
}
