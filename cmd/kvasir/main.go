// Command kvasir is an LLM inference engine and OpenAI-compatible server.
//
// Usage:
//
//	kvasir <command> [flags] [arguments]
//
// Run "kvasir help" for the list of commands.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/chat"
)

// command is one subcommand of the kvasir binary. Each lives in its own file and adds
// itself to the table with register from an init function.
type command struct {
	name    string
	summary string                    // one line for "kvasir help"
	run     func(args []string) error // receives the arguments after the command name
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	// Chat templates render in copies of this binary started as sandbox workers.
	chat.ServeWorkerIfAsked()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "help" || name == "-h" || name == "--help" {
		usage()
		return
	}
	if name == "--version" || name == "-version" || name == "version" {
		fmt.Println(versionLine())
		return
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kvasir: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "kvasir %s: %v\n", name, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "kvasir: LLM inference engine and OpenAI-compatible server")
	fmt.Fprintln(os.Stderr, "\nUsage: kvasir <command> [flags] [arguments]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun \"kvasir <command> -h\" for the flags of a command, \"kvasir --version\" for the version.")
}

// versionLine is what --version prints: kvasir's module version (a tagged release, or a
// pseudo-version or "(devel)" with the commit of the build), the Go version and platform.
func versionLine() string {
	v, commit := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				commit = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true" && commit != "":
				commit += "-dirty"
			}
		}
	}
	if commit != "" {
		v += " " + commit
	}
	return fmt.Sprintf("kvasir %s (%s, %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newFlags returns a flag set for a subcommand that reports errors instead of exiting.
func newFlags(name, usageLine string) *flag.FlagSet {
	fs := flag.NewFlagSet("kvasir "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kvasir %s %s\n\nFlags:\n", name, usageLine)
		fs.PrintDefaults()
	}
	return fs
}

// printJSON writes v to stdout as indented JSON: the output of every command's --json.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
