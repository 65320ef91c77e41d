package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// config resolves a command's settings: a flag given on the command line,
// else KVAUDIT_<FLAG> in the environment (dashes as underscores), else the
// command's section of kvaudit.yaml (`checksum: {engine: ref}`), else a
// top-level key of kvaudit.yaml (`engine: ref`), else the flag's default.
// kvaudit.yaml is read from --config, else the working directory, else
// $XDG_CONFIG_HOME/kvaudit (~/.config/kvaudit).
type config struct {
	v   *viper.Viper
	cmd *cobra.Command
	// file is the configuration file read ("" if none); lines maps the
	// keys of this command's settings in it (flag, or section.flag) to
	// their lines.
	file  string
	lines map[string]int
}

// configKey holds, in a command's context, the config the root's
// PersistentPreRunE resolved for this run (withConfig), so a run reads
// kvaudit.yaml and the environment once.
type configKey struct{}

// newConfig returns cmd's settings: the ones resolved for this run, else
// (a command run without the root) resolved now.
func newConfig(cmd *cobra.Command) (*config, error) {
	if ctx := cmd.Context(); ctx != nil {
		if c, ok := ctx.Value(configKey{}).(*config); ok && c.cmd == cmd {
			return c, nil
		}
	}
	return resolveConfig(cmd)
}

// withConfig resolves cmd's settings afresh and keeps them in its context
// for the rest of the run.
func withConfig(cmd *cobra.Command) (*config, error) {
	c, err := resolveConfig(cmd)
	if err != nil {
		return nil, err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	cmd.SetContext(context.WithValue(ctx, configKey{}, c))
	return c, nil
}

func resolveConfig(cmd *cobra.Command) (*config, error) {
	v := viper.New()
	v.SetEnvPrefix("KVAUDIT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, err
	}
	c := &config{v: v, cmd: cmd}
	if err := c.checkEnv(); err != nil {
		return nil, err
	}
	file, _ := cmd.Flags().GetString("config")
	if file == "" {
		file = findConfigFile()
	}
	if file != "" {
		data, err := c.readFile(file)
		if err != nil {
			return nil, err
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return nil, usageErrorf("reading configuration %q: %v", file, err)
		}
	}
	if err := c.checkRanges(); err != nil {
		return nil, err
	}
	if err := c.apply(); err != nil {
		return nil, err
	}
	return c, nil
}

// apply sets every flag of the command to its resolved value, so that an
// options field a flag is bound to (gh's BoolVar(&opts.X, ...)) holds the
// value from wherever it came (the flag, the environment, kvaudit.yaml).
// A flag's Changed is left as the command line made it. Lists are set
// as Strings reads them.
func (c *config) apply() error {
	var err error
	c.cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Name == "config" || f.Name == "help" {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if vals := c.Strings(f.Name); !slices.Equal(vals, sv.GetSlice()) {
				err = sv.Replace(vals)
			}
			return
		}
		switch f.Value.Type() {
		case "bool", "int", "uint64", "string", "duration":
			if v := c.String(f.Name); v != f.Value.String() {
				err = f.Value.Set(v)
			}
		}
		if err != nil {
			err = usageErrorf("%s: %v", c.Source(f.Name), err)
		}
	})
	return err
}

// maxConfigFile bounds kvaudit.yaml, read whole.
const maxConfigFile = 1 << 20

// checkEnv rejects a KVAUDIT_<FLAG> variable whose value the flag's type
// cannot take (KVAUDIT_SEED=abc, KVAUDIT_ALLOW_UNVERIFIED=yes), naming
// the variable.
func (c *config) checkEnv() error {
	var err error
	c.cmd.Flags().VisitAll(func(f *pflag.Flag) {
		name := envName(f.Name)
		val, ok := os.LookupEnv(name)
		if err != nil || !ok || val == "" || f.Changed {
			return
		}
		if want := checkValue(f, val); want != "" {
			err = usageErrorf("environment variable %s=%q: want %s", name, val, want)
		}
	})
	return err
}

// checkValue returns what a flag's type wants when val is not that, else "".
func checkValue(f *pflag.Flag, val string) string {
	switch f.Value.Type() {
	case "int":
		if _, err := strconv.ParseInt(val, 10, 0); err != nil {
			return "an integer"
		}
	case "uint64":
		if _, err := strconv.ParseUint(val, 10, 64); err != nil {
			return "a non-negative integer"
		}
	case "bool":
		if _, err := strconv.ParseBool(val); err != nil {
			return "true or false"
		}
	case "duration":
		if _, err := time.ParseDuration(val); err != nil {
			return "a duration (90s, 10m, 1h30m)"
		}
	}
	return ""
}

// readFile checks the configuration file: a YAML mapping whose keys are
// flags of some kvaudit command, or command names holding flags of that
// command; the values of this command's flags must suit their types.
// Errors name the file and line. It records where this command's settings
// come from, and returns the file's contents.
func (c *config) readFile(file string) ([]byte, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, usageErrorf("reading configuration %q: %v", file, err)
	}
	if !st.Mode().IsRegular() {
		return nil, usageErrorf("configuration %q is not a regular file", file)
	}
	if st.Size() > maxConfigFile {
		return nil, usageErrorf("configuration %q: %d bytes, more than the %d a configuration may hold", file, st.Size(), maxConfigFile)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErrorf("reading configuration %q: %v", file, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, usageErrorf("configuration %q: %v", file, err)
	}
	c.file, c.lines = file, map[string]int{}
	if len(doc.Content) == 0 {
		return data, nil // empty
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, usageErrorf("%s:%d: want a mapping of settings (key: value)", file, top.Line)
	}
	root := c.cmd.Root()
	commands := map[string]*cobra.Command{}
	all := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		commands[cmd.Name()] = cmd
		cmd.Flags().VisitAll(func(f *pflag.Flag) { all[f.Name] = true })
		cmd.PersistentFlags().VisitAll(func(f *pflag.Flag) { all[f.Name] = true })
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, val := top.Content[i], top.Content[i+1]
		if sub, ok := commands[k.Value]; ok && sub != root && val.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(val.Content); j += 2 {
				sk, sv := val.Content[j], val.Content[j+1]
				f := sub.Flags().Lookup(sk.Value)
				if f == nil || sk.Value == "config" || sk.Value == "help" {
					return nil, usageErrorf("%s:%d: unknown key %q in section %q (not a flag of kvaudit %s)", file, sk.Line, sk.Value, k.Value, k.Value)
				}
				if sub == c.cmd {
					if err := c.checkNode(f, k.Value+"."+sk.Value, sv); err != nil {
						return nil, err
					}
				}
			}
			continue
		}
		if !all[k.Value] || k.Value == "config" || k.Value == "help" {
			return nil, usageErrorf("%s:%d: unknown key %q (not a flag of any kvaudit command)", file, k.Line, k.Value)
		}
		if f := c.cmd.Flags().Lookup(k.Value); f != nil {
			if err := c.checkNode(f, k.Value, val); err != nil {
				return nil, err
			}
		}
	}
	return data, nil
}

// checkNode checks the value of flag f at key in the file and records its
// line.
func (c *config) checkNode(f *pflag.Flag, key string, n *yaml.Node) error {
	c.lines[key] = n.Line
	if f.Value.Type() == "stringSlice" && n.Kind == yaml.SequenceNode {
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				return usageErrorf("%s:%d: %s: want a list of strings", c.file, e.Line, key)
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return usageErrorf("%s:%d: %s: want a single value", c.file, n.Line, key)
	}
	if want := checkValue(f, n.Value); want != "" {
		return usageErrorf("%s:%d: %s: %q: want %s", c.file, n.Line, key, n.Value, want)
	}
	return nil
}

// mayBeNegative are the int flags (with a non-negative default) for which
// a negative value means something.
var mayBeNegative = map[string]bool{"max-details": true}

// checkRanges rejects a negative value, from wherever it came, for an int
// flag whose default is not negative (--threads -5, KVAUDIT_WORKERS=-1).
func (c *config) checkRanges() error {
	var err error
	c.cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Value.Type() != "int" || mayBeNegative[f.Name] {
			return
		}
		if def, _ := strconv.Atoi(f.DefValue); def < 0 {
			return // -1: unset (targets)
		}
		if n := c.Int(f.Name); n < 0 {
			err = usageErrorf("%s: %d is negative", c.Source(f.Name), n)
		}
	})
	return err
}

// Source says where a setting's value comes from: the flag, the
// environment variable, the configuration file and line, or the default.
func (c *config) Source(name string) string {
	if f := c.cmd.Flags().Lookup(name); f != nil && f.Changed {
		return "--" + name
	}
	if os.Getenv(envName(name)) != "" {
		return "environment variable " + envName(name)
	}
	if line, ok := c.lines[c.key(name)]; ok {
		return fmt.Sprintf("%s:%d: %s", c.file, line, c.key(name))
	}
	return "--" + name + " (default)"
}

// Explicit says whether a setting was given for this command (the flag,
// its environment variable, or the command's section of the configuration
// file, not a top-level key shared by every command), and where.
func (c *config) Explicit(name string) (string, bool) {
	if f := c.cmd.Flags().Lookup(name); (f != nil && f.Changed) || os.Getenv(envName(name)) != "" {
		return c.Source(name), true
	}
	if key := c.key(name); key != name {
		return c.Source(name), true
	}
	return "", false
}

// FromFile says whether a setting's value comes from the configuration
// file, and where ("file:line").
func (c *config) FromFile(name string) (string, bool) {
	if f := c.cmd.Flags().Lookup(name); (f != nil && f.Changed) || os.Getenv(envName(name)) != "" {
		return "", false
	}
	line, ok := c.lines[c.key(name)]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s:%d", c.file, line), true
}

// findConfigFile returns ./kvaudit.yaml, else
// $XDG_CONFIG_HOME/kvaudit/kvaudit.yaml, whichever exists first, or "".
// (Only these exact names: a file called plain "kvaudit", such as the
// binary itself, is never read as configuration.)
func findConfigFile() string {
	dirs := []string{"."}
	if dir, err := os.UserConfigDir(); err == nil {
		dirs = append(dirs, filepath.Join(dir, "kvaudit"))
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "kvaudit.yaml")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// key returns the viper key for a flag, preferring the command's section
// of the configuration file when the flag and the environment are silent.
func (c *config) key(name string) string {
	f := c.cmd.Flags().Lookup(name)
	section := c.cmd.Name() + "." + name
	if (f == nil || !f.Changed) && os.Getenv(envName(name)) == "" && c.v.InConfig(section) {
		return section
	}
	return name
}

func envName(flag string) string {
	return "KVAUDIT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func (c *config) String(name string) string { return c.v.GetString(c.key(name)) }
func (c *config) Int(name string) int       { return c.v.GetInt(c.key(name)) }
func (c *config) Uint64(name string) uint64 { return c.v.GetUint64(c.key(name)) }
func (c *config) Bool(name string) bool     { return c.v.GetBool(c.key(name)) }

// Duration reads a duration setting (--cuda-timeout).
func (c *config) Duration(name string) time.Duration { return c.v.GetDuration(c.key(name)) }

// Strings reads a list: a repeatable flag, a KVAUDIT_* variable or a
// configuration value, comma-separated the same way everywhere
// (KVAUDIT_REQUEST="a,b" is --request a,b), blanks dropped.
func (c *config) Strings(name string) []string {
	var out []string
	for _, v := range c.v.GetStringSlice(c.key(name)) {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}
func (c *config) Changed(name string) bool { return c.cmd.Flags().Changed(name) }
func (c *config) Flags() *pflag.FlagSet    { return c.cmd.Flags() }
