package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// parseFlags parses args into fs and refuses a negative value of any numeric flag given,
// which the commands would otherwise take for the flag's default (0 for most), and a NaN.
// The flags named in minusOne may be -1, their documented "off" value (--seed -1: from the
// clock), but no lower.
func parseFlags(fs *flag.FlagSet, args []string, minusOne ...string) error {
	if err := checkUnknownFlags(fs, args); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if err != nil || !ok {
			return
		}
		var v float64
		switch x := g.Get().(type) {
		case int:
			v = float64(x)
		case int64:
			v = float64(x)
		case float64:
			v = x
		case time.Duration:
			v = float64(x)
		default:
			return
		}
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		switch {
		case math.IsNaN(v):
			err = fmt.Errorf("%s%s %s: want a number", dash, f.Name, f.Value)
		case slices.Contains(minusOne, f.Name):
			if v < -1 {
				err = fmt.Errorf("%s%s %s: want -1 or more", dash, f.Name, f.Value)
			}
		case v < 0:
			err = fmt.Errorf("%s%s %s: must not be negative", dash, f.Name, f.Value)
		}
	})
	return err
}

// checkUnknownFlags refuses a flag fs does not define before fs.Parse would, naming the
// defined flag it most likely meant ("did you mean --kv-cache-memory?"). It reads args as
// the flag package does: up to the first argument that is not a flag, or "--".
func checkUnknownFlags(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a == "--" {
			return nil
		}
		name, hasValue := strings.TrimLeft(a, "-"), false
		if j := strings.IndexByte(name, '='); j >= 0 {
			name, hasValue = name[:j], true
		}
		if name == "h" || name == "help" {
			return nil // fs.Parse prints the help
		}
		f := fs.Lookup(name)
		if f == nil {
			msg := "unknown flag " + dashed(name)
			if near := nearestFlag(fs, name); near != "" {
				msg += fmt.Sprintf(": did you mean %s?", dashed(near))
			}
			return fmt.Errorf("%s (%s -h lists the flags)", msg, fs.Name())
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // the flag's value
		}
	}
	return nil
}

// nearestFlag returns the flag of fs whose name is closest to name in edit distance, when
// it is close enough to be a typo (at most a third of the name's letters, and at least
// one), or a flag that name is a prefix of; "" otherwise.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestDist := "", max(1, len(name)/3)+1
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if d < bestDist || d == bestDist && f.Name < best {
			best, bestDist = f.Name, d
		}
	})
	if bestDist > max(1, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the optimal-string-alignment distance of a and b: the fewest single-byte
// insertions, deletions, substitutions and swaps of neighbors that turn a into b.
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(rows[i-1][j-1]+cost, rows[i-1][j]+1, rows[i][j-1]+1)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, rows[i-2][j-2]+1)
			}
			rows[i][j] = d
		}
	}
	return rows[len(a)][len(b)]
}

// dashed writes a flag name as its help shows it: -m, --port.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
