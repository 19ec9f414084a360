package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// errHelp: --help was asked for and printed; exit 0.
var errHelp = errors.New("help printed")

// flagSet wraps flag.FlagSet so that every flag is also read from a FARM_*
// environment variable. Precedence: a flag on the command line beats the
// environment, which beats the built-in default.
type flagSet struct {
	*flag.FlagSet
	name, synopsis string
	out            io.Writer // where --help prints the usage
	// given holds the flags set on the command line or by the environment;
	// cmdline those set on the command line.
	given, cmdline map[string]bool
	// noEnv holds flags read from the command line only: selectors whose
	// value left in the environment by an earlier command would silently
	// widen what a destructive command acts on (farm cancel --batch).
	noEnv map[string]bool
	// aliases lists groups of flags that set one variable, each in the
	// order their environment variables are read.
	aliases [][]string
}

// alias declares flags bound to one variable. A flag of the group on the
// command line beats every variable of the group (parse would otherwise
// fill the others from theirs, over it); without one, the first variable
// set, in the order named, is taken.
func (fs *flagSet) alias(names ...string) {
	fs.aliases = append(fs.aliases, names)
}

// group is the alias group of a flag: itself alone when it has none.
func (fs *flagSet) group(name string) []string {
	for _, g := range fs.aliases {
		for _, n := range g {
			if n == name {
				return g
			}
		}
	}
	return []string{name}
}

// commandLineOnly exempts flags from the environment.
func (fs *flagSet) commandLineOnly(names ...string) {
	if fs.noEnv == nil {
		fs.noEnv = map[string]bool{}
	}
	for _, n := range names {
		fs.noEnv[n] = true
	}
}

func newFlagSet(name, synopsis string, out io.Writer) *flagSet {
	fs := flag.NewFlagSet("farm "+name, flag.ContinueOnError)
	// The flag package prints a bad flag's error and then the whole usage
	// (over a hundred lines for farm consumer). realMain prints the error
	// alone, in one line, as it does a bad environment value's; the usage
	// is printed for --help (printUsage).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis, out: out}
}

// printUsage prints the command's synopsis and its flags, each with its
// environment variable and default.
func (fs *flagSet) printUsage() {
	fmt.Fprintf(fs.out, "usage: farm %s %s\n\n", fs.name, fs.synopsis)
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def != "" {
			def = " (default " + def + ")"
		}
		env := "[" + envName(f.Name) + "]"
		if fs.noEnv[f.Name] {
			env = "[command line only]"
		}
		fmt.Fprintf(fs.out, "  --%s  %s%s\n      %s\n", f.Name, env, def, f.Usage)
	})
}

// parseError is the error of a flag the command line got wrong: --help
// prints the usage and is errHelp; any other is a usage error that says
// where the flags are listed.
func (fs *flagSet) parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.printUsage()
		return errHelp
	}
	msg := flagNamed.ReplaceAllString(err.Error(), "$1--$2")
	return usagef("%s (farm %s --help lists the flags)", msg, fs.name)
}

// flagNamed finds a flag's name in the flag package's errors ("invalid
// value \"-5\" for flag -capacity", "flag provided but not defined:
// -frob"), which spell it with one dash; the farm's flags are documented,
// and its own errors name them, with two.
var flagNamed = regexp.MustCompile(`(flag |for |argument: |defined: )-([A-Za-z0-9][-A-Za-z0-9_]*)`)

// envName maps a flag name to its environment variable: --exit-after-jobs is FARM_EXIT_AFTER_JOBS.
func envName(flagName string) string {
	return "FARM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse reads args, then fills every flag not given on the command line from
// its environment variable (a flag of an alias group: from its group's, and
// only when no flag of the group was given). A malformed environment value
// is an error that names the variable.
func (fs *flagSet) parse(args []string, getenv func(string) string) error {
	if err := fs.parseInterspersed(args); err != nil {
		return fs.parseError(err)
	}
	fs.given = map[string]bool{}
	fs.cmdline = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fs.given[f.Name], fs.cmdline[f.Name] = true, true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		group := fs.group(f.Name)
		for _, n := range group {
			if fs.given[n] {
				return
			}
		}
		for _, n := range group {
			if fs.noEnv[n] {
				continue
			}
			v := getenv(envName(n))
			if v == "" {
				continue
			}
			if err := fs.Set(n, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", envName(n), v, err))
			}
			for _, m := range group {
				fs.given[m] = true
			}
			return
		}
	})
	if len(errs) > 0 {
		return &usageError{errors.Join(errs...).Error()}
	}
	return nil
}

// parseNoArgs is parse for a command that takes flags only: an argument
// (`farm results BATCH` for `--batch BATCH`) is bad usage, not ignored.
func (fs *flagSet) parseNoArgs(args []string, getenv func(string) string) error {
	if err := fs.parse(args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s (this command takes flags only)", strings.Join(fs.Args(), " "))
	}
	return nil
}

// parseInterspersed parses flags before, between and after the arguments
// (`farm submit URL --wait`), which flag.FlagSet alone stops at the first
// argument; "--" still ends the flags. fs.Args() is then the arguments.
func (fs *flagSet) parseInterspersed(args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 || (consumed > 0 && args[consumed-1] == "--") {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}

// isGiven reports whether the flag was set on the command line or by its
// environment variable (rather than left at its default).
func (fs *flagSet) isGiven(name string) bool { return fs.given[name] }

// onCommandLine reports whether the flag was given on the command line.
func (fs *flagSet) onCommandLine(name string) bool { return fs.cmdline[name] }
