//! The OpenSandbox provider for EPP/1, as a WebAssembly component.
//!
//! Each `infra` function delegates to the module of its capability; those talk
//! to the OpenSandbox lifecycle server (`lifecycle`) and to each sandbox's execd
//! (`execd`) through `wasi:http` (`http`) and the host's `websocket`.

mod bindings;
mod code;
mod commands;
mod config;
mod error;
mod execd;
mod files;
mod files_many;
mod http;
mod lifecycle;
mod lines;
mod models;
mod ports;
mod process;
mod pty;
mod retry;
mod sandbox;
mod sessions;
mod sse;
mod stdin;
mod time;
mod transfer;
mod undo;
mod unsupported;
mod watch;

use bindings::abx::epp::types::{
    Capabilities, Capability, EppError, HeaderScope, ProviderInfo, ProviderNeeds, SecretHeader,
    Setting,
};
use bindings::exports::abx::epp::infra::{
    self, ByteRange, CodeContext, CodeRequest, CodeResult, CommandLogs, CommandRequest,
    CommandStatus, CreateRequest, FileInfo, Guest, ListRequest, MountRequest, PortUrl, ProcessInfo,
    PtyRequest, SandboxInfo, TemplateBuildRequest, TemplateInfo, TransferUrl,
};

/// Capabilities in EPP/1 order and whether this provider implements them.
pub const CAPABILITIES: &[(&str, Capabilities, bool)] = &[
    ("sandbox.lifecycle", Capabilities::SANDBOX_LIFECYCLE, true),
    ("sandbox.timeout", Capabilities::SANDBOX_TIMEOUT, true),
    ("sandbox.pause", Capabilities::SANDBOX_PAUSE, true),
    ("exec.run", Capabilities::EXEC_RUN, true),
    ("exec.stream", Capabilities::EXEC_STREAM, true),
    ("process.manage", Capabilities::PROCESS_MANAGE, true),
    ("pty", Capabilities::PTY, true),
    ("files.rw", Capabilities::FILES_RW, true),
    ("ports.url", Capabilities::PORTS_URL, true),
    ("files.watch", Capabilities::FILES_WATCH, true),
    ("files.transfer", Capabilities::FILES_TRANSFER, true),
    ("code.interpret", Capabilities::CODE_INTERPRET, true),
    ("templates.read", Capabilities::TEMPLATES_READ, false),
    ("templates.build", Capabilities::TEMPLATES_BUILD, false),
    ("ports.domain", Capabilities::PORTS_DOMAIN, false),
    ("storage.mount", Capabilities::STORAGE_MOUNT, false),
    ("network.vpc", Capabilities::NETWORK_VPC, false),
    ("sessions", Capabilities::SESSIONS, true),
];

struct Provider;

type R<T> = Result<T, EppError>;

impl Guest for Provider {
    type CommandStream = commands::CommandStream;
    type PtyStream = pty::PtyStream;
    type FileReader = files::FileReader;
    type FileWriter = files::FileWriter;
    type WatchStream = watch::WatchStream;
    type CodeStream = code::CodeStream;
    type BatchWriter = files_many::BatchWriter;

    fn describe() -> ProviderInfo {
        ProviderInfo {
            id: "opensandbox".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: CAPABILITIES
                .iter()
                .map(|(name, _, supported)| Capability {
                    name: name.to_string(),
                    supported: *supported,
                })
                .collect(),
            settings: opensandbox_settings::SETTINGS
                .iter()
                .map(|s| Setting {
                    name: s.name.into(),
                    env: s.env.iter().map(|e| e.to_string()).collect(),
                    default_value: s.default.map(str::to_string),
                    secret: s.secret,
                    description: s.description.into(),
                })
                .collect(),
        }
    }

    fn needs() -> ProviderNeeds {
        use opensandbox_settings as s;
        ProviderNeeds {
            capabilities: CAPABILITIES
                .iter()
                .filter(|(_, _, supported)| *supported)
                .fold(Capabilities::empty(), |all, (_, flag, _)| all | *flag),
            // The same order as `Origin::from_env`: base_url, then domain (a URL
            // itself, or host[:port] with protocol), then the default.
            origin: vec![
                "{base_url}".into(),
                "{domain}".into(),
                "{protocol=http}://{domain}".into(),
                s::DEFAULT_BASE_URL.into(),
            ],
            // In direct mode execd is published on a port of the server's host.
            origin_host_any_port: true,
            allow_hosts_env: vec![s::ALLOW_HOSTS_ENV.into()],
            secret_headers: vec![SecretHeader {
                setting: "api_key".into(),
                header: s::API_KEY_HEADER.into(),
                scope: HeaderScope::Origin,
            }],
            // EPP/1's generic provider_options keys.
            generic_settings: vec![
                ("sandbox_base_url".into(), "base_url".into()),
                ("sandbox_api_key".into(), "api_key".into()),
            ],
        }
    }

    fn check_settings() -> R<()> {
        config::settings().map(drop)
    }

    fn undo(token: String) -> R<String> {
        undo::undo(&token)
    }

    fn sandbox_create(req: CreateRequest) -> R<SandboxInfo> {
        sandbox::create(req)
    }
    fn sandbox_connect(sandbox_id: String) -> R<SandboxInfo> {
        sandbox::connect(&sandbox_id)
    }
    fn sandbox_get_info(sandbox_id: String) -> R<SandboxInfo> {
        sandbox::get_info(&sandbox_id)
    }
    fn sandbox_list(req: ListRequest) -> R<Vec<SandboxInfo>> {
        sandbox::list(req)
    }
    fn sandbox_kill(sandbox_id: String) -> R<()> {
        sandbox::kill(&sandbox_id)
    }
    fn sandbox_set_timeout(sandbox_id: String, timeout: u32) -> R<String> {
        sandbox::set_timeout(&sandbox_id, timeout)
    }
    fn sandbox_pause(sandbox_id: String) -> R<()> {
        sandbox::pause(&sandbox_id)
    }
    fn sandbox_resume(sandbox_id: String) -> R<SandboxInfo> {
        sandbox::resume(&sandbox_id)
    }

    fn commands_run(req: CommandRequest) -> R<infra::CommandStream> {
        commands::run(req).map(infra::CommandStream::new)
    }
    fn commands_run_stdin(req: CommandRequest) -> R<infra::CommandStream> {
        stdin::run(req).map(|pipe| infra::CommandStream::new(commands::CommandStream::Pipe(pipe)))
    }
    fn commands_start(req: CommandRequest) -> R<String> {
        commands::start_background(req)
    }
    fn commands_kill(sandbox_id: String, command_id: String) -> R<()> {
        commands::kill(&sandbox_id, &command_id)
    }
    fn commands_status(sandbox_id: String, command_id: String) -> R<CommandStatus> {
        commands::status(&sandbox_id, &command_id)
    }
    fn commands_logs(
        sandbox_id: String,
        command_id: String,
        cursor: Option<u64>,
    ) -> R<CommandLogs> {
        commands::logs(&sandbox_id, &command_id, cursor)
    }

    fn process_list(sandbox_id: String) -> R<Vec<ProcessInfo>> {
        process::list(&sandbox_id)
    }
    fn process_signal(sandbox_id: String, pid: u32, signal: String) -> R<()> {
        process::signal(&sandbox_id, pid, &signal)
    }
    fn commands_send_input(sandbox_id: String, command_id: String, data: Vec<u8>) -> R<()> {
        stdin::send_input(&sandbox_id, &command_id, data)
    }

    fn pty_create(req: PtyRequest) -> R<(String, infra::PtyStream)> {
        pty::create(req).map(|(id, stream)| (id, infra::PtyStream::new(stream)))
    }
    fn pty_send_input(sandbox_id: String, pty_id: String, data: Vec<u8>) -> R<()> {
        pty::send_input(&sandbox_id, &pty_id, data)
    }
    fn pty_resize(sandbox_id: String, pty_id: String, cols: u16, rows: u16) -> R<()> {
        pty::resize(&sandbox_id, &pty_id, cols, rows)
    }
    fn pty_kill(sandbox_id: String, pty_id: String) -> R<()> {
        pty::kill(&sandbox_id, &pty_id)
    }

    fn files_read(
        sandbox_id: String,
        path: String,
        range: Option<ByteRange>,
    ) -> R<infra::FileReader> {
        files::read(&sandbox_id, &path, range).map(infra::FileReader::new)
    }
    fn files_write(
        sandbox_id: String,
        path: String,
        size: u64,
        mode: Option<u32>,
    ) -> R<infra::FileWriter> {
        files::write(&sandbox_id, &path, size, mode).map(infra::FileWriter::new)
    }
    fn files_write_many(
        sandbox_id: String,
        files: Vec<infra::FileUpload>,
    ) -> R<infra::BatchWriter> {
        files_many::write_many(&sandbox_id, files).map(infra::BatchWriter::new)
    }
    fn files_list(sandbox_id: String, path: String, depth: u32) -> R<Vec<FileInfo>> {
        files::list(&sandbox_id, &path, depth)
    }
    fn files_get_info(sandbox_id: String, path: String) -> R<FileInfo> {
        files::get_info(&sandbox_id, &path)
    }
    fn files_exists(sandbox_id: String, path: String) -> R<bool> {
        files::exists(&sandbox_id, &path)
    }
    fn files_make_dir(sandbox_id: String, path: String) -> R<bool> {
        files::make_dir(&sandbox_id, &path)
    }
    fn files_remove(sandbox_id: String, path: String) -> R<()> {
        files::remove(&sandbox_id, &path)
    }
    fn files_rename(sandbox_id: String, old_path: String, new_path: String) -> R<FileInfo> {
        files::rename(&sandbox_id, &old_path, &new_path)
    }
    fn files_search(sandbox_id: String, path: String, pattern: String) -> R<Vec<FileInfo>> {
        files::search(&sandbox_id, &path, &pattern)
    }

    fn ports_url(sandbox_id: String, port: u16) -> R<PortUrl> {
        ports::url(&sandbox_id, port)
    }

    fn files_watch(sandbox_id: String, path: String, recursive: bool) -> R<infra::WatchStream> {
        watch::watch(&sandbox_id, &path, recursive).map(infra::WatchStream::new)
    }
    fn files_upload_url(sandbox_id: String, path: String) -> R<TransferUrl> {
        transfer::upload_url(&sandbox_id, &path)
    }
    fn files_download_url(sandbox_id: String, path: String) -> R<TransferUrl> {
        transfer::download_url(&sandbox_id, &path)
    }
    fn code_run(req: CodeRequest) -> R<CodeResult> {
        code::run_collected(req)
    }
    fn code_create_context(
        sandbox_id: String,
        language: Option<String>,
        cwd: Option<String>,
    ) -> R<String> {
        code::create_context(&sandbox_id, language.as_deref(), cwd.as_deref()).map(|c| c.context_id)
    }
    fn code_run_events(req: CodeRequest) -> R<infra::CodeStream> {
        code::run(req).map(infra::CodeStream::new)
    }
    fn code_list_contexts(sandbox_id: String, language: Option<String>) -> R<Vec<CodeContext>> {
        code::list_contexts(&sandbox_id, language.as_deref())
    }
    fn code_get_context(sandbox_id: String, context_id: String) -> R<CodeContext> {
        code::get_context(&sandbox_id, &context_id)
    }
    fn code_remove_context(sandbox_id: String, context_id: String) -> R<()> {
        code::remove_context(&sandbox_id, &context_id)
    }
    fn code_interrupt(sandbox_id: String, context_id: String) -> R<()> {
        code::interrupt(&sandbox_id, &context_id)
    }
    fn code_restart_context(sandbox_id: String, context_id: String) -> R<CodeContext> {
        code::restart_context(&sandbox_id, &context_id)
    }
    fn code_languages(sandbox_id: String) -> R<Vec<String>> {
        code::languages(&sandbox_id)
    }
    fn templates_list() -> R<Vec<TemplateInfo>> {
        Err(unsupported::capability("templates.list"))
    }
    fn templates_get(_: String) -> R<TemplateInfo> {
        Err(unsupported::capability("templates.get"))
    }
    fn templates_build(_: TemplateBuildRequest) -> R<TemplateInfo> {
        Err(unsupported::capability("templates.build"))
    }
    fn ports_domain(_: String, _: u16, _: String) -> R<PortUrl> {
        Err(unsupported::capability("ports.domain"))
    }
    fn storage_mount(_: MountRequest) -> R<()> {
        Err(unsupported::capability("storage.mount"))
    }
    fn storage_unmount(_: String, _: String) -> R<()> {
        Err(unsupported::capability("storage.unmount"))
    }
    fn network_vpc_attach(_: String, _: String) -> R<()> {
        Err(unsupported::capability("network.vpc_attach"))
    }
    fn network_vpc_detach(_: String, _: String) -> R<()> {
        Err(unsupported::capability("network.vpc_detach"))
    }
    fn sessions_create(sandbox_id: String, cwd: Option<String>) -> R<String> {
        sessions::create(&sandbox_id, cwd.as_deref())
    }
    fn sessions_run(
        sandbox_id: String,
        session_id: String,
        cmd: String,
        timeout_ms: Option<u64>,
    ) -> R<infra::CommandStream> {
        sessions::run(&sandbox_id, &session_id, &cmd, timeout_ms).map(infra::CommandStream::new)
    }
    fn sessions_close(sandbox_id: String, session_id: String) -> R<()> {
        sessions::close(&sandbox_id, &session_id)
    }
}

impl infra::GuestBatchWriter for files_many::BatchWriter {
    fn write(&self, chunk: Vec<u8>) -> R<()> {
        files_many::BatchWriter::write(self, chunk)
    }
    fn finish(&self) -> R<Vec<FileInfo>> {
        files_many::BatchWriter::finish(self)
    }
}

bindings::export!(Provider with_types_in bindings);
