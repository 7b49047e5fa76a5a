package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestServerEnergy reads kvasir:energy_joules_total from two scrapes and checks the run's
// joules, watts and joules per token, and that they reach the summary and the JSON.
func TestServerEnergy(t *testing.T) {
	scrape := func(gpu, cpu string) map[string]float64 {
		t.Helper()
		text := "# TYPE kvasir:energy_joules_total counter\n" +
			`kvasir:energy_joules_total{model_name="m",source="nvml GPU 0"} ` + gpu + "\n" +
			`kvasir:energy_joules_total{model_name="m",source="rapl package-0"} ` + cpu + "\n" +
			`kvasir:generation_tokens_total{model_name="m"} 5` + "\n"
		e, err := ParseEnergyCounters(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	before, after := scrape("100", "40"), scrape("350", "90")
	if len(before) != 2 || before["nvml GPU 0"] != 100 || before["rapl package-0"] != 40 {
		t.Fatalf("parsed %v", before)
	}
	e := ServerEnergyDelta(before, after, 10, 600)
	if e == nil || e.Joules != 300 || e.Watts != 30 || e.JoulesPerToken != 0.5 || strings.Join(e.Sources, ",") != "nvml GPU 0,rapl package-0" {
		t.Fatalf("energy %+v, want 300 J, 30 W, 0.5 J/token", e)
	}
	if ServerEnergyDelta(map[string]float64{}, map[string]float64{}, 10, 600) != nil {
		t.Error("energy without counters")
	}
	if ServerEnergyDelta(before, scrape("50", "90"), 10, 600) != nil {
		t.Error("energy from a counter that went down (a restarted server)")
	}

	res := &Result{Duration: 10 * time.Second, Energy: e}
	var out bytes.Buffer
	WriteSummary(&out, Report{}, res)
	for _, want := range []string{fmt.Sprintf("%-40s 0.5000", "Energy per output token (J):"), fmt.Sprintf("%-40s 30.00", "Average power (W):"),
		fmt.Sprintf("%-40s nvml GPU 0, rapl package-0", "Measured by:")} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	b, err := ResultJSON(Report{}, res, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var saved map[string]any
	if err := json.Unmarshal(b, &saved); err != nil || saved["energy_joules"] != 300.0 || saved["energy_per_output_token_j"] != 0.5 || saved["average_power_w"] != 30.0 {
		t.Errorf("saved result: %v: energy_joules %v, energy_per_output_token_j %v, average_power_w %v", err, saved["energy_joules"], saved["energy_per_output_token_j"], saved["average_power_w"])
	}
	out.Reset()
	WriteSummary(&out, Report{}, &Result{Duration: time.Second})
	if !strings.Contains(out.String(), "not available (the server exports no kvasir:energy_joules_total)") {
		t.Errorf("summary without energy:\n%s", out.String())
	}
}
