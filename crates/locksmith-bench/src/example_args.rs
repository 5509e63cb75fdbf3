//! The command line of the bench examples that start their own servers (`bench_single`,
//! `bench_cluster`): the `locksmith` binary to serve and bench with, optionally another build
//! to compare it with in the same run, then `locksmith bench`'s own options.

/// `PATH-TO-locksmith [--before PATH-TO-OTHER-locksmith] [bench options…]`.
///
/// ```
/// use locksmith_bench::ExampleArgs;
/// let args = ExampleArgs::parse(["new/locksmith", "--before", "old/locksmith", "--rounds", "3"].map(String::from));
/// let args = args.expect("a binary was given");
/// assert_eq!(args.bin, "new/locksmith");
/// assert_eq!(args.before.as_deref(), Some("old/locksmith"));
/// assert_eq!(args.bench, ["--rounds", "3"]);
/// assert!(ExampleArgs::parse(Vec::<String>::new()).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExampleArgs {
    /// The `locksmith` binary: it serves the native backends and runs `locksmith bench`.
    pub bin: String,
    /// Another build, served beside the first for a before/after comparison.
    pub before: Option<String>,
    /// The rest: passed to `locksmith bench` as they are.
    pub bench: Vec<String>,
}

impl ExampleArgs {
    /// Splits the arguments (without the program name); `None` when no binary was given.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Option<Self> {
        let mut args = args.into_iter();
        let bin = args.next()?;
        let mut bench: Vec<String> = args.collect();
        let before = match bench.first().map(String::as_str) {
            Some("--before") if bench.len() > 1 => {
                let other = bench.remove(1);
                bench.remove(0);
                Some(other)
            }
            _ => None,
        };
        Some(Self { bin, before, bench })
    }
}
