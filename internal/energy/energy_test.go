package energy

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeZone writes a RAPL domain under root.
func fakeZone(t *testing.T, root, dir, name string, max, energy uint64) string {
	t.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"name": name + "\n", "max_energy_range_uj": strconv.FormatUint(max, 10) + "\n",
		"energy_uj": strconv.FormatUint(energy, 10) + "\n"} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(d, "energy_uj")
}

func setEnergy(t *testing.T, path string, uj uint64) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.FormatUint(uj, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestRAPL reads a fake powercap tree: only the package domains count (not their
// subdomains, psys or the mmio mirror), and a counter that wraps past max_energy_range_uj
// is read across the wrap.
func TestRAPL(t *testing.T) {
	root := t.TempDir()
	pkg0 := fakeZone(t, root, "intel-rapl:0", "package-0", 1_000_000, 900_000)
	pkg1 := fakeZone(t, root, "intel-rapl:2", "package-1", 5_000_000, 10)
	fakeZone(t, root, "intel-rapl:0:0", "core", 1_000_000, 5)
	fakeZone(t, root, "intel-rapl:1", "psys", 1_000_000, 5)
	fakeZone(t, root, "intel-rapl-mmio:0", "package-0", 1_000_000, 5)
	counters, err := RAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range counters {
		names = append(names, c.Name())
	}
	if strings.Join(names, ",") != "rapl package-0,rapl package-1" {
		t.Fatalf("counters %v", names)
	}
	m := NewMeter(counters, "")
	defer m.Close()
	span := m.Start()
	setEnergy(t, pkg0, 950_000) // +50 000 uJ
	if j, err := counters[0].Joules(); err != nil || !near(j, 0.05) {
		t.Errorf("package-0 after +0.05 J: %v J, %v", j, err)
	}
	setEnergy(t, pkg0, 100_000) // wrapped: +(1 000 000 - 950 000) + 100 000 uJ
	setEnergy(t, pkg1, 300_010) // +300 000 uJ
	r := span.End(100)
	want := 0.05 + 0.15 + 0.3
	if !r.Available || !near(r.Joules, want) || !near(r.JoulesPerToken, want/100) || r.OutputTokens != 100 || len(r.Sources) != 2 {
		t.Errorf("report %+v, want %v J, %v J/token", r, want, want/100)
	}
	if r.Seconds <= 0 || !near(r.Watts, r.Joules/r.Seconds) {
		t.Errorf("seconds %v, watts %v", r.Seconds, r.Watts)
	}
	if s := r.String(); !strings.Contains(s, "0.5 J") || !strings.Contains(s, "0.0050 J per output token") || !strings.Contains(s, "(rapl package-0 0.2 J, rapl package-1 0.3 J)") {
		t.Errorf("line %q", s)
	}

	// A counter that vanishes mid-span makes the report unavailable, saying why.
	os.Remove(pkg1)
	if r := m.Start().End(1); r.Available || !strings.Contains(r.Reason, "package-1") {
		t.Errorf("report with a counter gone: %+v", r)
	}
}

func TestAdvance(t *testing.T) {
	for _, c := range []struct{ last, now, max, want uint64 }{
		{10, 25, 100, 15}, {90, 5, 100, 15}, {0, 0, 100, 0}, {100, 0, 100, 0}, {7, 7, 100, 0},
	} {
		if got := advance(c.last, c.now, c.max); got != c.want {
			t.Errorf("advance(%d, %d, max %d) = %d, want %d", c.last, c.now, c.max, got, c.want)
		}
	}
}

// TestNotAvailable checks a meter without counters reports why, and that an empty or
// malformed powercap tree is an error, not a counter.
func TestNotAvailable(t *testing.T) {
	if _, err := RAPL(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no RAPL package domain") {
		t.Errorf("empty tree: %v", err)
	}
	root := t.TempDir()
	p := fakeZone(t, root, "intel-rapl:0", "package-0", 1000, 5)
	setEnergy(t, p, 0)
	os.WriteFile(p, []byte("lots\n"), 0o644)
	if _, err := RAPL(root); err == nil {
		t.Error("a malformed energy_uj was accepted")
	}
	m := NewMeter(nil, "no RAPL package domain under /x; cuda: NVML (libnvidia-ml.so.1) not found")
	defer m.Close()
	r := m.Start().End(10)
	if r.Available || r.String() != "energy: not available (no RAPL package domain under /x; cuda: NVML (libnvidia-ml.so.1) not found)" {
		t.Errorf("report %+v: %s", r, r)
	}
}

// TestOpen opens this machine's counters: whatever it finds, the report is consistent.
func TestOpen(t *testing.T) {
	m := Open()
	defer m.Close()
	r := m.Start().End(1)
	if r.Available != m.Available() || (!r.Available && r.Reason == "") || (r.Available && r.Joules < 0) {
		t.Errorf("report %+v", r)
	}
	t.Log(r)
}
