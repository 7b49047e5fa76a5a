package main

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"time"
)

// parseFlags parses args into fs and refuses a negative value of any numeric flag given,
// which the commands would otherwise take for the flag's default (0 for most), and a NaN.
// The flags named in minusOne may be -1, their documented "off" value (--seed -1: from the
// clock), but no lower.
func parseFlags(fs *flag.FlagSet, args []string, minusOne ...string) error {
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
