//! The OpenSandbox provider for EPP/1, as a WebAssembly component.
//!
//! Each `infra` function delegates to the module of its capability; those talk
//! to the OpenSandbox lifecycle server (`lifecycle`) and to each sandbox's execd
//! (`execd`) through `wasi:http` (`http`) and the host's `websocket`.

mod bindings;
mod broken_off;
mod code;
mod commands;
mod config;
mod error;
mod event_stream;
mod execd;
mod exit_code;
mod files;
mod http;
mod lifecycle;
mod lines;
mod metrics;
mod models;
mod ports;
mod process;
mod pty;
mod refusal;
mod retry;
mod sandbox;
mod sessions;
mod shell;
mod sse;
mod storage;
mod templates;
mod time;
mod transfer;
mod undo;
mod unsupported;
mod users;
mod utf8;
mod watch;

use bindings::abx::epp::types::{
    Capabilities, Capability, EppError, HeaderScope, ProviderInfo, ProviderNeeds, SecretHeader,
    Setting,
};
use bindings::exports::abx::epp::infra::{
    self, ByteRange, CodeContext, CodeRequest, CodeResult, CommandLogs, CommandRequest,
    CommandStatus, CreateRequest, FileInfo, Guest, ListRequest, MetricsSample, MountRequest,
    PortUrl, ProcessInfo, PtyRequest, SandboxInfo, SandboxPage, TemplateBuildRequest, TemplateInfo,
    TransferUrl,
};
use event_stream::Source;
use std::cell::RefCell;
use wasip2::io::streams::{InputStream, OutputStream};

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
    ("templates.read", Capabilities::TEMPLATES_READ, true),
    ("templates.build", Capabilities::TEMPLATES_BUILD, true),
    ("ports.domain", Capabilities::PORTS_DOMAIN, false),
    ("storage.mount", Capabilities::STORAGE_MOUNT, true),
    ("network.vpc", Capabilities::NETWORK_VPC, false),
    ("sessions", Capabilities::SESSIONS, true),
];

struct Provider;

type R<T> = Result<T, EppError>;

/// The one conversion of the provider's errors into abx:epp's: every export
/// answers through it, with the settings in hand for redaction.
fn wit<T>(result: error::Result<T>) -> R<T> {
    result.map_err(|e| e.into_epp(config::settings().ok()))
}

impl Guest for Provider {
    type CommandStream = Stream<infra::CommandEvent>;
    type PtyStream = pty::PtyStream;
    type FileReader = files::FileReader;
    type FileWriter = files::FileWriter;
    type WatchStream = watch::WatchStream;
    type CodeStream = Stream<infra::CodeEvent>;
    type BatchWriter = files::BatchWriter;

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

    fn reusable() -> bool {
        // The one static is `config`'s settings, made once from the
        // environment, which an instance never sees change; every other
        // state lives in the resources of a call, which the host checks are
        // gone before it keeps an instance.
        true
    }

    fn check_settings() -> R<()> {
        wit(config::settings().map(drop))
    }

    fn undo(token: String) -> R<String> {
        wit(undo::undo(&token))
    }

    fn sandbox_create(req: CreateRequest) -> R<SandboxInfo> {
        wit(sandbox::create(req))
    }
    fn sandbox_connect(sandbox_id: String) -> R<SandboxInfo> {
        wit(sandbox::connect(&sandbox_id))
    }
    fn sandbox_get_info(sandbox_id: String) -> R<SandboxInfo> {
        wit(sandbox::get_info(&sandbox_id))
    }
    fn sandbox_list(req: ListRequest) -> R<SandboxPage> {
        wit(sandbox::list(req))
    }
    fn sandbox_kill(sandbox_id: String) -> R<()> {
        wit(sandbox::kill(&sandbox_id))
    }
    fn sandbox_set_metadata(
        sandbox_id: String,
        metadata: Vec<(String, String)>,
        remove: Vec<String>,
    ) -> R<SandboxInfo> {
        wit(sandbox::set_metadata(&sandbox_id, &metadata, &remove))
    }
    fn sandbox_metrics(sandbox_id: String) -> R<MetricsSample> {
        wit(metrics::get(&sandbox_id))
    }
    fn sandbox_set_timeout(sandbox_id: String, timeout: u32) -> R<String> {
        wit(sandbox::set_timeout(&sandbox_id, timeout))
    }
    fn sandbox_pause(sandbox_id: String) -> R<()> {
        wit(sandbox::pause(&sandbox_id))
    }
    fn sandbox_resume(sandbox_id: String) -> R<SandboxInfo> {
        wit(sandbox::resume(&sandbox_id))
    }

    fn commands_run(req: CommandRequest) -> R<infra::CommandStream> {
        wit(commands::run(req).map(|s| infra::CommandStream::new(Stream::new(s))))
    }
    fn commands_run_stdin(req: CommandRequest) -> R<infra::CommandStream> {
        wit(commands::stdin::run(req).map(|pipe| infra::CommandStream::new(Stream::new(pipe))))
    }
    fn commands_start(req: CommandRequest) -> R<String> {
        wit(commands::start_background(req))
    }
    fn commands_kill(sandbox_id: String, command_id: String) -> R<()> {
        wit(commands::kill(&sandbox_id, &command_id))
    }
    fn commands_status(sandbox_id: String, command_id: String) -> R<CommandStatus> {
        wit(commands::status(&sandbox_id, &command_id))
    }
    fn commands_logs(
        sandbox_id: String,
        command_id: String,
        cursor: Option<u64>,
    ) -> R<CommandLogs> {
        wit(commands::logs(&sandbox_id, &command_id, cursor))
    }

    fn commands_connect(sandbox_id: String, command_id: String) -> R<infra::CommandStream> {
        wit(commands::connect(&sandbox_id, &command_id)
            .map(|attached| infra::CommandStream::new(Stream::new(attached))))
    }

    fn process_list(sandbox_id: String) -> R<Vec<ProcessInfo>> {
        wit(process::list(&sandbox_id))
    }
    fn process_signal(sandbox_id: String, pid: u32, signal: String) -> R<()> {
        wit(process::signal(&sandbox_id, pid, &signal))
    }
    fn commands_send_input(sandbox_id: String, command_id: String, data: Vec<u8>) -> R<()> {
        wit(commands::stdin::send_input(&sandbox_id, &command_id, data))
    }

    fn pty_create(req: PtyRequest) -> R<(String, infra::PtyStream)> {
        wit(pty::create(req).map(|(id, stream)| (id, infra::PtyStream::new(stream))))
    }
    fn pty_send_input(sandbox_id: String, pty_id: String, data: Vec<u8>) -> R<()> {
        wit(pty::send_input(&sandbox_id, &pty_id, data))
    }
    fn pty_resize(sandbox_id: String, pty_id: String, cols: u16, rows: u16) -> R<()> {
        wit(pty::resize(&sandbox_id, &pty_id, cols, rows))
    }
    fn pty_kill(sandbox_id: String, pty_id: String) -> R<()> {
        wit(pty::kill(&sandbox_id, &pty_id))
    }
    fn pty_connect(
        sandbox_id: String,
        pty_id: String,
        since: Option<u64>,
    ) -> R<(String, infra::PtyStream)> {
        wit(pty::connect(&sandbox_id, &pty_id, since)
            .map(|(id, stream)| (id, infra::PtyStream::new(stream))))
    }

    fn files_read(
        sandbox_id: String,
        path: String,
        range: Option<ByteRange>,
    ) -> R<infra::FileReader> {
        wit(files::read(&sandbox_id, &path, range).map(infra::FileReader::new))
    }
    fn files_write(
        sandbox_id: String,
        path: String,
        size: u64,
        mode: Option<u32>,
        owner: Option<String>,
        group: Option<String>,
    ) -> R<infra::FileWriter> {
        let owner = files::Owner::new(owner, group);
        wit(files::write(&sandbox_id, &path, size, mode, owner).map(infra::FileWriter::new))
    }
    fn files_write_many(
        sandbox_id: String,
        files: Vec<infra::FileUpload>,
    ) -> R<infra::BatchWriter> {
        wit(files::write_many(&sandbox_id, files).map(infra::BatchWriter::new))
    }
    fn files_list(sandbox_id: String, path: String, depth: u32) -> R<Vec<FileInfo>> {
        wit(files::list(&sandbox_id, &path, depth))
    }
    fn files_get_info(sandbox_id: String, path: String) -> R<FileInfo> {
        wit(files::get_info(&sandbox_id, &path))
    }
    fn files_exists(sandbox_id: String, path: String) -> R<bool> {
        wit(files::exists(&sandbox_id, &path))
    }
    fn files_make_dir(sandbox_id: String, path: String) -> R<bool> {
        wit(files::make_dir(&sandbox_id, &path))
    }
    fn files_remove(sandbox_id: String, path: String) -> R<()> {
        wit(files::remove(&sandbox_id, &path))
    }
    fn files_rename(sandbox_id: String, old_path: String, new_path: String) -> R<FileInfo> {
        wit(files::rename(&sandbox_id, &old_path, &new_path))
    }
    fn files_search(sandbox_id: String, path: String, pattern: String) -> R<Vec<FileInfo>> {
        wit(files::search(&sandbox_id, &path, &pattern))
    }
    fn files_chmod(
        sandbox_id: String,
        path: String,
        mode: Option<u32>,
        owner: Option<String>,
        group: Option<String>,
    ) -> R<FileInfo> {
        let owner = files::Owner::new(owner, group);
        wit(files::chmod(&sandbox_id, &path, mode, owner))
    }
    fn files_replace(sandbox_id: String, path: String, old: String, new: String) -> R<u32> {
        wit(files::replace(&sandbox_id, &path, &old, &new))
    }

    fn ports_url(sandbox_id: String, port: u16) -> R<PortUrl> {
        wit(ports::url(&sandbox_id, port))
    }

    fn files_watch(sandbox_id: String, path: String, recursive: bool) -> R<infra::WatchStream> {
        wit(watch::watch(&sandbox_id, &path, recursive).map(infra::WatchStream::new))
    }
    fn files_upload_url(sandbox_id: String, path: String) -> R<TransferUrl> {
        wit(transfer::upload_url(&sandbox_id, &path))
    }
    fn files_download_url(sandbox_id: String, path: String) -> R<TransferUrl> {
        wit(transfer::download_url(&sandbox_id, &path))
    }
    fn code_run(req: CodeRequest) -> R<CodeResult> {
        wit(code::run_collected(req))
    }
    fn code_create_context(
        sandbox_id: String,
        language: Option<String>,
        cwd: Option<String>,
    ) -> R<String> {
        wit(
            code::create_context(&sandbox_id, language.as_deref(), cwd.as_deref())
                .map(|c| c.context_id),
        )
    }
    fn code_run_events(req: CodeRequest) -> R<infra::CodeStream> {
        wit(code::run(req).map(|s| infra::CodeStream::new(Stream::new(s))))
    }
    fn code_list_contexts(sandbox_id: String, language: Option<String>) -> R<Vec<CodeContext>> {
        wit(code::list_contexts(&sandbox_id, language.as_deref()))
    }
    fn code_get_context(sandbox_id: String, context_id: String) -> R<CodeContext> {
        wit(code::get_context(&sandbox_id, &context_id))
    }
    fn code_remove_context(sandbox_id: String, context_id: String) -> R<()> {
        wit(code::remove_context(&sandbox_id, &context_id))
    }
    fn code_interrupt(sandbox_id: String, context_id: String) -> R<()> {
        wit(code::interrupt(&sandbox_id, &context_id))
    }
    fn code_restart_context(sandbox_id: String, context_id: String) -> R<CodeContext> {
        wit(code::restart_context(&sandbox_id, &context_id))
    }
    fn code_languages(sandbox_id: String) -> R<Vec<String>> {
        wit(code::languages(&sandbox_id))
    }
    fn templates_list() -> R<Vec<TemplateInfo>> {
        wit(templates::list())
    }
    fn templates_get(name: String) -> R<TemplateInfo> {
        wit(templates::get(&name))
    }
    fn templates_build(req: TemplateBuildRequest) -> R<TemplateInfo> {
        wit(templates::build(req))
    }
    fn templates_remove(name: String) -> R<()> {
        wit(templates::remove(&name))
    }
    fn ports_domain(_: String, _: u16, _: String) -> R<PortUrl> {
        wit(Err(unsupported::capability("ports.domain")))
    }
    fn storage_mount(_: MountRequest) -> R<()> {
        wit(Err(storage::at_create("storage.mount")))
    }
    fn storage_unmount(_: String, _: String) -> R<()> {
        wit(Err(storage::at_create("storage.unmount")))
    }
    fn network_vpc_attach(_: String, _: String) -> R<()> {
        wit(Err(unsupported::capability("network.vpc_attach")))
    }
    fn network_vpc_detach(_: String, _: String) -> R<()> {
        wit(Err(unsupported::capability("network.vpc_detach")))
    }
    fn sessions_create(sandbox_id: String, cwd: Option<String>, user: Option<String>) -> R<String> {
        wit(sessions::create(
            &sandbox_id,
            cwd.as_deref(),
            user.as_deref(),
        ))
    }
    fn sessions_run(
        sandbox_id: String,
        session_id: String,
        cmd: String,
        timeout_ms: Option<u64>,
    ) -> R<infra::CommandStream> {
        wit(sessions::run(&sandbox_id, &session_id, &cmd, timeout_ms)
            .map(|s| infra::CommandStream::new(Stream::new(s))))
    }
    fn sessions_close(sandbox_id: String, session_id: String) -> R<()> {
        wit(sessions::close(&sandbox_id, &session_id))
    }
}

// The resources' methods: each answers through `wit` too.

/// A stream resource of events `E`, whichever source serves it (execd's
/// event streams, a PTY pipe).
pub struct Stream<E>(RefCell<Box<dyn Source<E>>>);

impl<E> Stream<E> {
    fn new(source: impl Source<E> + 'static) -> Stream<E> {
        Stream(RefCell::new(Box::new(source)))
    }

    fn next(&self) -> error::Result<Option<Vec<E>>> {
        self.0.borrow_mut().next()
    }
}

impl infra::GuestCommandStream for Stream<infra::CommandEvent> {
    fn next(&self) -> R<Option<Vec<infra::CommandEvent>>> {
        wit(Stream::next(self))
    }
}

impl infra::GuestCodeStream for Stream<infra::CodeEvent> {
    fn next(&self) -> R<Option<Vec<infra::CodeEvent>>> {
        wit(Stream::next(self))
    }
}

impl infra::GuestPtyStream for pty::PtyStream {
    fn next(&self) -> R<Option<infra::PtyEvent>> {
        wit(pty::PtyStream::next(self))
    }
}

impl infra::GuestWatchStream for watch::WatchStream {
    fn next(&self) -> R<Option<infra::FileEvent>> {
        wit(watch::WatchStream::next(self))
    }
}

impl infra::GuestFileReader for files::FileReader {
    fn size(&self) -> Option<u64> {
        files::FileReader::size(self)
    }
    fn read(&self, max: u32) -> R<Option<Vec<u8>>> {
        wit(files::FileReader::read(self, max))
    }
    fn read_into(&self, sink: &OutputStream, max: u64) -> R<Option<u64>> {
        wit(files::FileReader::read_into(self, sink, max))
    }
}

impl infra::GuestFileWriter for files::FileWriter {
    fn write(&self, chunk: Vec<u8>) -> R<()> {
        wit(files::FileWriter::write(self, chunk))
    }
    fn write_from(&self, source: &InputStream, len: u64) -> R<()> {
        wit(files::FileWriter::write_from(self, source, len))
    }
    fn finish(&self) -> R<FileInfo> {
        wit(files::FileWriter::finish(self))
    }
}

impl infra::GuestBatchWriter for files::BatchWriter {
    fn write(&self, chunk: Vec<u8>) -> R<()> {
        wit(files::BatchWriter::write(self, chunk))
    }
    fn finish(&self) -> R<Vec<FileInfo>> {
        wit(files::BatchWriter::finish(self))
    }
}

bindings::export!(Provider with_types_in bindings);
