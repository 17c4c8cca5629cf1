package testserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrometheus scrapes an endpoint of the test's and evaluates a
// recording rule over it: both reach the HTTP API.
func TestPrometheus(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE testserver_answer gauge")
		fmt.Fprintln(w, "testserver_answer 42")
	}))
	defer web.Close()
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte("groups:\n  - name: test\n    rules:\n      - record: testserver:answer:doubled\n        expr: 2 * testserver_answer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := PrometheusWith(t, PrometheusConfig{Targets: []string{strings.TrimPrefix(web.URL, "http://")}, RuleFiles: []string{rules}})
	for _, tc := range []struct{ expr, want string }{
		{`up{job="` + PrometheusJob + `"}`, "1"},
		{"testserver_answer", "42"},
		{"testserver:answer:doubled", "84"},
	} {
		if got := pollQuery(t, p.Addr, tc.expr); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.expr, got, tc.want)
		}
	}
	// Another Prometheus's port is not taken for this one's.
	port, _ := strconv.Atoi(p.Addr[strings.LastIndexByte(p.Addr, ':')+1:])
	if err := probePrometheus(port, "/elsewhere"); err == nil || !strings.Contains(err.Error(), "another prometheus") {
		t.Errorf("probe of a Prometheus with another data directory: %v", err)
	}
}

// pollQuery returns the value of the first series expr returns, polling
// the HTTP API until there is one (the first scrapes take a moment).
func pollQuery(t *testing.T, addr, expr string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err == nil {
			var r struct {
				Data struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err == nil && len(r.Data.Result) > 0 {
				return fmt.Sprint(r.Data.Result[0].Value[1])
			}
			last = fmt.Sprintf("%s: %+v, %v", resp.Status, r, err)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no series after 15s; last answer: %s", expr, last)
		}
		<-tick.C
	}
}
