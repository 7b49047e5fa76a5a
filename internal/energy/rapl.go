package energy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// DefaultRAPLRoot is where Linux's powercap framework lists the RAPL domains.
const DefaultRAPLRoot = "/sys/class/powercap"

// raplPackage matches a top-level RAPL domain (a CPU package); its subdomains
// (intel-rapl:0:0, the cores; :1, DRAM or uncore) are parts or extras of it, and
// intel-rapl-mmio mirrors it, so neither is summed.
var raplPackage = regexp.MustCompile(`^intel-rapl:\d+$`)

// raplZone is one RAPL domain's counter: energy_uj, which counts microjoules up to
// max_energy_range_uj and then starts again from 0.
type raplZone struct {
	name, path string
	max        uint64 // max_energy_range_uj

	mu    sync.Mutex
	last  uint64 // the raw value last read
	total uint64 // microjoules since opened
}

// RAPL opens the package domains under root ("psys", the platform domain that includes
// the packages, is left out). It returns an error saying why when there are none or one
// cannot be read (energy_uj is readable by root only since Linux 5.10).
func RAPL(root string) ([]Counter, error) {
	dirs, _ := filepath.Glob(filepath.Join(root, "intel-rapl:*"))
	sort.Strings(dirs)
	var out []Counter
	for _, d := range dirs {
		if !raplPackage.MatchString(filepath.Base(d)) {
			continue
		}
		name, _ := os.ReadFile(filepath.Join(d, "name"))
		zone := strings.TrimSpace(string(name))
		if zone == "psys" {
			continue
		}
		max, err := readUint(filepath.Join(d, "max_energy_range_uj"))
		if err != nil {
			return nil, fmt.Errorf("RAPL %s: %w", d, err)
		}
		z := &raplZone{name: "rapl " + zone, path: filepath.Join(d, "energy_uj"), max: max}
		if z.last, err = readUint(z.path); err != nil {
			if os.IsPermission(err) {
				return nil, fmt.Errorf("RAPL %s is readable by root only (Linux 5.10 and later): %w", z.path, err)
			}
			return nil, fmt.Errorf("RAPL: %w", err)
		}
		out = append(out, z)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no RAPL package domain under %s", root)
	}
	return out, nil
}

func (z *raplZone) Name() string { return z.name }

// Joules reads the counter and adds what it advanced since the last read, across a wrap.
func (z *raplZone) Joules() (float64, error) {
	raw, err := readUint(z.path)
	if err != nil {
		return 0, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.total += advance(z.last, raw, z.max)
	z.last = raw
	return float64(z.total) / 1e6, nil
}

// advance is how far a counter that wraps after max went from last to now: one wrap when
// it went down.
func advance(last, now, max uint64) uint64 {
	if now >= last {
		return now - last
	}
	return max - last + now
}

// readUint reads a sysfs file holding one unsigned integer.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
