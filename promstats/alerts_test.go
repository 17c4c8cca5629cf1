package promstats_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/shardcache/shardcache/internal/testserver"
)

const (
	alertsFile     = "../docs/alerts.yml"
	alertsTestFile = "testdata/alerts_test.yml"
)

// TestAlertRules checks docs/alerts.yml with promtool, and runs its unit
// tests (testdata/alerts_test.yml): series that cross each alert's line,
// and series that do not.
func TestAlertRules(t *testing.T) {
	promtool := testserver.Promtool(t)
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", alertsTestFile},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %q: %v\n%s", args, err, out)
		}
	}
}

// ruleFile is the part of a Prometheus rule file the conventions read.
type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr string
			For                 string
			Labels, Annotations map[string]string
		}
	}
}

// TestAlertRulesConventions holds docs/alerts.yml to the conventions its
// header states, which the rules to come (issue #25's skew rules) follow:
// group and rule names, a severity and the annotations on every alert, and
// for every alert a test evaluation where it fires and one where it does
// not.
func TestAlertRulesConventions(t *testing.T) {
	var rules ruleFile
	readYAML(t, alertsFile, &rules)
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name          string
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	readYAML(t, alertsTestFile, &tests)
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "../"+alertsFile {
		t.Errorf("%s tests %v, want [../%s]", alertsTestFile, tests.RuleFiles, alertsFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}

	groupRE := regexp.MustCompile(`^shardcache-[a-z-]+$`)
	recordRE := regexp.MustCompile(`^shardcache:[a-z_]+:[a-z0-9_]+$`)
	alertRE := regexp.MustCompile(`^Shardcache[A-Z][A-Za-z]+$`)
	alerts := 0
	for _, g := range rules.Groups {
		if !groupRE.MatchString(g.Name) {
			t.Errorf("group %q: want shardcache-<concern>", g.Name)
		}
		for _, r := range g.Rules {
			switch {
			case r.Record != "":
				if !recordRE.MatchString(r.Record) {
					t.Errorf("recording rule %q: want shardcache:<what>:<window>", r.Record)
				}
			case !alertRE.MatchString(r.Alert):
				t.Errorf("alert %q: want Shardcache<What>", r.Alert)
			default:
				alerts++
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: want a summary and a description", r.Alert)
				}
				if !fires[r.Alert] || !quiet[r.Alert] {
					t.Errorf("%s: %s has no evaluation where it fires (%v) or none where it does not (%v)",
						r.Alert, alertsTestFile, fires[r.Alert], quiet[r.Alert])
				}
			}
		}
	}
	if alerts < 3 {
		t.Errorf("%d alerts, want at least node down, fallback stuck and hit rate falling", alerts)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
