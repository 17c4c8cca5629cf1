package testserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrometheusJob is the job label of the targets Prometheus scrapes.
const PrometheusJob = "shardcache"

// PrometheusConfig is what a Prometheus started by PrometheusWith scrapes
// and evaluates.
type PrometheusConfig struct {
	// Targets are "HOST:PORT" addresses serving /metrics, scraped as job
	// PrometheusJob.
	Targets []string
	// RuleFiles are rule files to evaluate (alerting and recording rules).
	RuleFiles []string
	// Interval is the scrape and rule evaluation interval; 0 means 1s.
	Interval time.Duration
}

// Prometheus starts Debian's prometheus on a free loopback port, with a
// data directory of the test's, scraping each target ("HOST:PORT", serving
// /metrics) every second. Its HTTP API is at "http://" + Addr.
func Prometheus(t testing.TB, targets ...string) *Server {
	t.Helper()
	return PrometheusWith(t, PrometheusConfig{Targets: targets})
}

// PrometheusWith starts prometheus as Prometheus does, with the rule files
// and interval of cfg.
func PrometheusWith(t testing.TB, cfg PrometheusConfig) *Server {
	t.Helper()
	bin := binary(t, "prometheus")
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	for _, target := range cfg.Targets {
		if _, _, err := net.SplitHostPort(target); err != nil {
			t.Fatalf("testserver: prometheus target %q: want HOST:PORT: %v", target, err)
		}
	}
	rules := []string{}
	for _, f := range cfg.RuleFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatalf("testserver: prometheus rule file %q: %v", f, err)
		}
		rules = append(rules, abs)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "prometheus.yml")
	// JSON is YAML: every value quoted as Prometheus reads it.
	yml, err := json.MarshalIndent(map[string]any{
		"global": map[string]string{
			"scrape_interval":     cfg.Interval.String(),
			"scrape_timeout":      cfg.Interval.String(),
			"evaluation_interval": cfg.Interval.String(),
		},
		"rule_files": rules,
		"scrape_configs": []any{map[string]any{
			"job_name":       PrometheusJob,
			"static_configs": []any{map[string]any{"targets": append([]string{}, cfg.Targets...)}},
		}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, yml, 0o644); err != nil {
		t.Fatalf("testserver: prometheus config: %v", err)
	}
	args := func(ports []int) []string {
		return []string{
			"--config.file=" + conf,
			"--storage.tsdb.path=" + data,
			"--web.listen-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		}
	}
	return launch(t, bin, 1, args, func(ports []int, _ int) error { return probePrometheus(ports[0], data) })
}

// probePrometheus checks that Prometheus is ready (its storage open, its
// configuration read) and that the one answering is this process: the one
// whose data directory is data.
func probePrometheus(port int, data string) error {
	base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get(base + "/-/ready")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/-/ready: %s", resp.Status)
	}
	resp, err = hc.Get(base + "/api/v1/status/flags")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var flags struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &flags); err != nil {
		return fmt.Errorf("/api/v1/status/flags: %v: %.200s", err, body)
	}
	if got := flags.Data["storage.tsdb.path"]; got != data {
		return fmt.Errorf("port taken by another prometheus (data in %q)", strings.TrimSpace(got))
	}
	return nil
}

// Promtool returns the path of promtool, which Debian's prometheus package
// installs beside it: missing, the test skips, or fails under CI=true.
func Promtool(t testing.TB) string {
	t.Helper()
	return binary(t, "promtool")
}
