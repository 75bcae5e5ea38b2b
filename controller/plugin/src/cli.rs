//! The command line: kubectl's global flags (`--kubeconfig`, `--context`, `-n/--namespace`,
//! `-A/--all-namespaces`, `-o/--output`) and one subcommand per task. Every flag is parsed
//! here, once; the subcommands receive typed arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `kubectl booking`: the booking operator's everyday tasks from kubectl.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-booking",
    bin_name = "kubectl booking",
    version,
    about = "Book the EC2 and RDS machines of the booking operator, and tag them for it",
    long_about = "Book the EC2 instances and RDS databases that the booking operator switches on \
                  for a booked slot, see who holds each Resource and when it is free, and tag \
                  machines so the operator manages them.",
    after_help = "Examples:\n  \
        kubectl booking instances --region eu-west-1\n  \
        kubectl booking tag i-0abc i-0def --group web\n  \
        kubectl booking status\n  \
        kubectl booking timeline ec2.web --days 7\n  \
        kubectl booking timeline ec2.web --free --for 2h\n  \
        kubectl booking book ec2.web --for 2h --at 09:00 --tz Europe/Berlin\n  \
        kubectl booking extend ec2.web-x7k2p --by 30m\n  \
        kubectl booking release ec2.web-x7k2p\n\n\
        Exit codes: 0 success, 1 the request failed or was refused, 2 bad usage."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// kubectl's own global flags, with the same names and environment.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<String>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace scope of this request (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// List across all namespaces (commands that list).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `-o`: kubectl's output formats that apply here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for a terminal.
    Table,
    /// JSON, one document.
    Json,
    /// YAML, one document.
    Yaml,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List EC2 instances, RDS DB instances and Aurora DB clusters with their booking tags.
    #[command(after_help = "Examples:\n  kubectl booking instances\n  \
        kubectl booking instances --region eu-west-1 --region us-east-1\n  \
        kubectl booking instances --managed -o json")]
    Instances(InstancesArgs),
    /// Mark machines as managed by the operator (or not, with --disable).
    #[command(after_help = "Examples:\n  kubectl booking manage i-0abc i-0def\n  \
        kubectl booking manage i-0abc --disable\n  \
        kubectl booking manage reporting-db --dry-run")]
    Manage(ManageArgs),
    /// Put machines into a booking group (the application tag a Resource names).
    #[command(
        after_help = "Examples:\n  kubectl booking tag i-0abc i-0def --group web\n  \
        kubectl booking tag reporting-db --group reporting --dry-run"
    )]
    Tag(TagArgs),
    /// Who holds each Resource, until when, and what is next.
    #[command(
        long_about = "Who holds each Resource, until when, what is next, and the state of its \
                      machines.\n\n\
                      HELD BY, BOOKING, UNTIL and NEXT are computed from the Resource's Bookings \
                      with the controller's own rule (the earlier-created of two overlapping \
                      bookings holds the Resource; without a booking, its manual spec.booked_by), \
                      at the current time: they are right even when the controller is not \
                      running. GROUP (the machines' state and how many of them run) is what the \
                      controller last wrote to the Resource's status; when that status names \
                      another holder than the Bookings do, a note on stderr says so.",
        after_help = "Examples:\n  kubectl booking status\n  \
        kubectl booking status ec2.web\n  kubectl booking status -A -o yaml"
    )]
    Status(StatusArgs),
    /// A Resource's bookings day by day, or its free slots.
    #[command(
        long_about = "A Resource's bookings day by day: a row per day of --tz, one character per \
                      half-hour of the wall clock (the hours line up under the ruler; on the day \
                      the clocks jump forward the skipped half-hours stay blank, the row of a \
                      23 h or 25 h day says so), each booking that holds the Resource drawn \
                      with its letter in the legend, and a ^ under the current time. A booking \
                      that overlaps an earlier-created one never holds the Resource: it is \
                      listed with - and not drawn.\n\n\
                      With --free: the free slots of those days, from now on, at least --for \
                      long.",
        after_help = "Examples:\n  kubectl booking timeline ec2.web\n  \
        kubectl booking timeline ec2.web --days 3 --tz Europe/Berlin\n  \
        kubectl booking timeline ec2.web --from 2026-12-07 --days 2\n  \
        kubectl booking timeline ec2.web --free --for 2h -o json"
    )]
    Timeline(TimelineArgs),
    /// Book a Resource for a slot.
    #[command(
        long_about = "Book a Resource for a slot: creates a Booking of it in the namespace. The \
                      Resource must exist there. The admission webhook checks the booking; a \
                      denial (e.g. an overlap, naming the booking in the way) is printed as the \
                      API server returns it, with exit code 1. A wall time that --tz skips or \
                      passes twice (daylight saving) is refused: give RFC 3339 with an offset.",
        after_help = "Examples:\n  kubectl booking book ec2.web --for 2h --now\n  \
        kubectl booking book ec2.web --for 90m --at 2026-12-02T09:00:00Z\n  \
        kubectl booking book ec2.web --for 1h --at '2026-12-02 09:00' --tz Europe/Berlin \
        --notify email:team@example.com\n  \
        kubectl booking book ec2.web --for 1h30m --at 14:00 --dry-run -o yaml"
    )]
    Book(BookArgs),
    /// Move a booking's end later (or earlier, with a negative duration).
    #[command(
        long_about = "Move a booking's end later (or earlier, with a negative duration). The \
                      webhook refuses an end that overlaps the next booking. A booking that has \
                      ended cannot be extended; to end one now, use release. The change is a \
                      merge patch on the resourceVersion read: a booking changed meanwhile is \
                      refused (run again) rather than overwritten.",
        after_help = "Examples:\n  kubectl booking extend ec2.web-x7k2p --by 30m\n  \
        kubectl booking extend ec2.web-x7k2p --by=-15m"
    )]
    Extend(ExtendArgs),
    /// End a booking now: its machines are switched off (unless the next booking follows).
    #[command(
        long_about = "End a booking now: its end_at becomes the current time (to the second), and its machines are switched off unless the next booking \
                      follows. A booking that has not started yet is not released: cancel it \
                      with kubectl delete bookings.manager.kotaico.de NAME. A booking that has \
                      ended is an error.",
        after_help = "Examples:\n  kubectl booking release ec2.web-x7k2p\n  \
        kubectl delete bookings.manager.kotaico.de ec2.web-x7k2p   # cancel one not started"
    )]
    Release(ReleaseArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  source <(kubectl booking completion bash)\n  \
        kubectl booking completion zsh > \"${fpath[1]}/_kubectl-booking\""
    )]
    Completion(CompletionArgs),
}

/// Where the AWS commands look and how they authenticate (the AWS CLI's credential chain).
#[derive(Debug, Clone, Args)]
pub struct AwsArgs {
    /// AWS region; repeat for several (default: the AWS configuration's region).
    #[arg(long = "region", value_name = "REGION")]
    pub regions: Vec<String>,
    /// Prefix of the operator's tag keys (`<prefix>managed`, `<prefix>application`, …): the
    /// controller's `--tag-prefix`. The original's `resource-booking-…` keys are read too.
    #[arg(
        long,
        env = "BOOKING_TAG_PREFIX",
        default_value = booking_controller::tags::DEFAULT_PREFIX,
        value_name = "PREFIX"
    )]
    pub tag_prefix: String,
}

/// `instances`.
#[derive(Debug, Args)]
pub struct InstancesArgs {
    #[command(flatten)]
    pub aws: AwsArgs,
    /// Only machines carrying the managed tag.
    #[arg(long)]
    pub managed: bool,
    /// Only EC2 or only RDS.
    #[arg(long = "type", value_name = "TYPE", value_parser = ["ec2", "rds"])]
    pub type_: Option<String>,
}

/// `manage`.
#[derive(Debug, Args)]
pub struct ManageArgs {
    /// EC2 instance IDs (`i-…`) or RDS DB instance / DB cluster identifiers.
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Remove the managed tag instead of setting it.
    #[arg(long)]
    pub disable: bool,
    /// Show what would change; make no AWS write.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// `tag`.
#[derive(Debug, Args)]
pub struct TagArgs {
    /// EC2 instance IDs (`i-…`) or RDS DB instance / DB cluster identifiers.
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// The group: the value of the application tag, which a Resource's `spec.tag` names.
    #[arg(long, value_name = "NAME")]
    pub group: String,
    /// Show what would change; make no AWS write.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One Resource (default: every Resource of the namespace, or of all with -A).
    #[arg(value_name = "RESOURCE")]
    pub resource: Option<String>,
}

/// `timeline`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The Resource.
    #[arg(value_name = "RESOURCE")]
    pub resource: String,
    /// How many days to show, from --from.
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=92))]
    pub days: u32,
    /// List the free slots instead of drawing the timeline.
    #[arg(long)]
    pub free: bool,
    /// With --free: the least length of a free slot, e.g. 2h, 90m, 1h30m, 1d (24 h).
    #[arg(long = "for", value_name = "DURATION", requires = "free")]
    pub for_: Option<String>,
    /// IANA time zone of the days and times shown (default: UTC).
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// The first day shown, a date in --tz (`2026-12-07`; default: today).
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
}

/// `book`.
#[derive(Debug, Args)]
pub struct BookArgs {
    /// The Resource to book.
    #[arg(value_name = "RESOURCE")]
    pub resource: String,
    /// Length of the slot, e.g. 2h, 90m, 1h30m, 2d (a day counts 24 h).
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: String,
    /// Start: RFC 3339 (`2026-12-02T09:00:00Z`) or local wall time in --tz
    /// (`2026-12-02 09:00`, `09:00` for the next such time).
    #[arg(
        long,
        value_name = "TIME",
        conflicts_with = "now",
        required_unless_present = "now"
    )]
    pub at: Option<String>,
    /// Start now.
    #[arg(long)]
    pub now: bool,
    /// The booking's user id (default: filled by the webhook with your Kubernetes user).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// A notification, `email:ADDRESS`; repeat for several.
    #[arg(long, value_name = "TYPE:RECIPIENT")]
    pub notify: Vec<String>,
    /// IANA time zone of a wall-time --at (default: UTC).
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// Name of the Booking (default: generated from the Resource's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print the Booking that would be created (server-side dry run: the webhook still checks it).
    #[arg(long)]
    pub dry_run: bool,
}

/// `extend`.
#[derive(Debug, Args)]
pub struct ExtendArgs {
    /// The Booking.
    #[arg(value_name = "BOOKING")]
    pub booking: String,
    /// How much later the booking ends, e.g. 30m, 1h; negative to shorten (`--by=-15m`).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub by: String,
}

/// `release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The Booking.
    #[arg(value_name = "BOOKING")]
    pub booking: String,
}

/// `completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
