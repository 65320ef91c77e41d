package cli

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
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
}

func newConfig(cmd *cobra.Command) (*config, error) {
	v := viper.New()
	v.SetEnvPrefix("KVAUDIT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, err
	}
	file, _ := cmd.Flags().GetString("config")
	if file == "" {
		file = findConfigFile()
	}
	if file != "" {
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return nil, usageErrorf("reading configuration %q: %v", file, err)
		}
	}
	return &config{v: v, cmd: cmd}, nil
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
