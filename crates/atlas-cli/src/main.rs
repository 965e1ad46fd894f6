//! The `atlas` binary: the command line of the atlas-cli library, run with this process's arguments.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(atlas_cli::run_command_line(std::env::args_os()))
}
