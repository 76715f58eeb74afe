"""A drill's resources (workdirs, fork template, services, model fake) and how it launches attempts.

:class:`killdrill.drill.Drill` is composed of parts that share one :class:`DrillSetup`:
discovery (:mod:`killdrill.drill.discovery`), the judge of a case
(:mod:`killdrill.drill.case_verdict`) and the runner of a case's attempts
(:mod:`killdrill.drill.case`).
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from killdrill import envvars
from killdrill.drill.db_effects import EffectRows
from killdrill.drill.deployment import Deployed, DeploymentCase
from killdrill.drill.env import bootstrap_dir, expand_env, fill, fill_env, model_env, resolve_command
from killdrill.drill.errors import STATE_DIR
from killdrill.drill.setup_checks import detection_env
from killdrill.drill.topology import Process, Topology, check_faults, check_placeholders
from killdrill.drill.workdirs import RunContext, Workdirs
from killdrill.errors import HarnessError, one_line
from killdrill.fakes.existing import load_existing
from killdrill.fakes.http import FakesServer
from killdrill.fakes.model import ModelFake
from killdrill.fakes.model_script import load_script
from killdrill.faults import fleet
from killdrill.faults.kinds import Scene
from killdrill.faults.plan import Plan
from killdrill.faults.proxied import Proxies
from killdrill.integrations import (
    Service,
    check_options,
    exit_aborts,
    find,
    known,
    option_rows,
    preload_modules,
    record_waits,
    start_services,
)
from killdrill.isolation import isolated
from killdrill.options import (
    ANSWER_CANNOT,
    ANSWER_NEEDS_INTEGRATION,
    FORK_NEEDS_PYTHON,
    FORK_NEEDS_PYTHON_RESUME,
    OPTIONS,
    UNKNOWN_CHECK,
    DrillOptions,
)
from killdrill.points import Fault, Schedule
from killdrill.process.forks import DEFAULT_PRELOAD, ForkTemplate, WardenHost, python_target
from killdrill.process.nemesis import Nemesis
from killdrill.process.ports import Ports
from killdrill.process.readiness import accepts
from killdrill.process.supervisor import LaunchSpec, Running, Supervisor
from killdrill.records import EXITED, Attempt
from killdrill.verdict import OPT_IN_CHECKS

if TYPE_CHECKING:
    from killdrill.fakes.wire.smtp import SmtpFake


UPSTREAMS = "proxy_upstreams"
"""``Scene.extra``'s key of a deployment case's ``--proxy`` targets, ``{port:NAME}`` filled."""

# Who starts fork templates for a drill that does not own one: (python, preload, env, cwd) -> a
# started ForkTemplate (killdrill.pytest_plugin's session pool).
TemplateSource = Callable[[str, Sequence[str], Mapping[str, str], str | None], ForkTemplate]


class DrillSetup:
    """What every part of a drill shares: the command and options, the workdirs, the fork template,
    the integrations' services and the model fake, and how attempts are launched."""

    def __init__(self, command: Sequence[str], options: DrillOptions) -> None:
        self.command = tuple(command)
        if options.integration_options:  # their rows are the integrations' records (above options)
            options = replace(options, integration_options=check_options(options))
        self.options = options
        # the enabled integrations' option rows, for a case's reproduction line
        self.option_rows = option_rows(options.integrations) if options.integration_options else ()
        self.argv = resolve_command(self.command)
        self._resume_argv = resolve_command(self.options.resume_with) if self.options.resume_with else None
        existing = load_existing(os.path.abspath(self.options.existing)) if self.options.existing else None
        self.workdirs = Workdirs(self.options.root, self.options.ledger_url, existing)
        self.effect_rows = EffectRows(self.options.effect_table, self.options.effect_db)  # --effect-table
        self._lock = threading.Lock()
        self._template: ForkTemplate | None = None
        self._template_source: TemplateSource | None = None  # set: templates someone else keeps
        self._services: list[Service] | None = None  # integrations' services (a runtime's server)
        # --serve: the case is a deployment (services and this command as their driver)
        self.topology = Topology(self.options, self.argv) if self.options.serve else None
        if self.topology is None:
            check_placeholders(self.options, self.command)  # a deployment's are checked by its topology
        # The options were checked when built; these rules need the command or the check
        # registry (killdrill.options words them, naming each option as the caller did).
        spelled = self.options.spelled
        unknown = [c for c in self.options.checks if c not in OPT_IN_CHECKS]
        if unknown:
            raise UNKNOWN_CHECK.error(
                self.options, spelled, OPTIONS, name=unknown[0], known=", ".join(OPT_IN_CHECKS)
            )
        if self.options.answer:
            self._check_answers()
        self.model = self._load_model()
        if self.options.launcher == "fork" and not python_target(self.argv):
            raise FORK_NEEDS_PYTHON.error(self.options, spelled, OPTIONS)
        if self.options.launcher == "fork" and self._resume_argv and not python_target(self._resume_argv):
            raise FORK_NEEDS_PYTHON_RESUME.error(self.options, spelled, OPTIONS)

    def _check_answers(self) -> None:
        """``--answer`` needs an enabled integration that answers its framework's interrupts."""
        can = sorted(name for name, i in known().items() if i.answers)
        enabled = []
        for name in self.options.integrations:
            try:
                enabled.append(find(name))
            except ImportError:
                continue  # an unknown integration: said by discovery, in one line
        if any(i.answers for i in enabled):
            return
        spelled = self.options.spelled
        if not enabled:
            raise ANSWER_NEEDS_INTEGRATION.error(self.options, spelled, OPTIONS, can=" or ".join(can))
        raise ANSWER_CANNOT.error(self.options, spelled, OPTIONS, name=enabled[0].name, can=", ".join(can))

    def _load_model(self) -> ModelFake | None:
        """The model fake of this drill, its script read and checked now (a one-line ScriptError)."""
        if self.options.model_script is None:
            return None
        return ModelFake(load_script(os.path.abspath(self.options.model_script)), self.options.model_variance)

    def share_templates(self, source: TemplateSource) -> None:
        """Fork attempts from the templates ``source`` keeps (a pytest session's pool): this drill
        then neither starts nor closes one, so its heavy imports are paid once per session."""
        self._template_source = source

    def fork_template(self) -> ForkTemplate | None:
        """The fork template, started on first use and closed with the drill (or at exit)."""
        if self.options.launcher != "fork":
            return None
        with self._lock:
            if self._template is None:
                preload = [*DEFAULT_PRELOAD, *self.options.preload]
                preload += preload_modules(self.options.integrations)
                env = detection_env(
                    self.env(RunContext(self.workdirs.root, "kd-template")),
                    self.options.integrations,
                    bootstrap_dir(),
                )
                if self._template_source is not None:
                    return self._template_source(self.argv[0], preload, env, self.options.cwd)
                self._template = ForkTemplate(
                    self.argv[0], preload=preload, env=env, cwd=self.options.cwd
                ).start()
                weakref.finalize(self, self._template.close)
            return self._template

    def _service_env(self, run: RunContext) -> dict[str, str]:
        """What the integrations' services add to a launch of ``run`` (started on first use)."""
        with self._lock:
            if self._services is None:
                self._services = start_services(
                    self.options.integrations, self.root, WardenHost(), self.options
                )
                for service in self._services:
                    weakref.finalize(self, service.close)
            services = list(self._services)
        env: dict[str, str] = {}
        for service in services:
            env.update(service.env(run.workdir, run.thread))
        return env

    def _forgive_exit_abort(self, a: Attempt) -> Attempt:
        """An attempt a framework's known abort at exit ended after its work closed (the record's
        ``exit_abort``: SIGABRT or SIGSEGV once the workflow completed) as the clean exit it is, with the
        integration's note; any other abort, or one before that point, stays as it is."""
        if a.outcome != EXITED or not a.trace:
            return a
        for rule in exit_aborts(self.options.integrations):
            if rule.forgives(a.returncode, a.trace[-1].point):
                note = f"{rule.note} (exit {a.returncode} after {a.trace[-1].label})"
                return replace(a, returncode=0, notes=(*a.notes, note))
        return a

    def explain_hang(self, run: RunContext) -> tuple[str, dict[str, Any]] | None:
        """What an integration's service still holds for ``run`` when an attempt of it hung
        (a runtime's server: the open workflow and its pending activities), or None.  A service
        whose variables the user's ``--env`` replaced is not asked: the run used another (a
        ``--serve`` broker), and the service's account would be of one the run never touched."""
        services = self.services()
        own = set(self.options.env)
        for service in services:
            explain = getattr(service, "explain_hang", None)
            if explain is None:
                continue
            try:
                if own & set(service.env(run.workdir, run.thread)):
                    continue
                found: tuple[str, dict[str, Any]] | None = explain(run.workdir, run.thread)
            except Exception as exc:  # the runtime could not say: the hang stands as it is
                return f"the runtime could not be asked what it still holds ({one_line(exc)[0]})", {}
            if found:
                return found
        return None

    def runtime_waits(
        self, run: RunContext, timeline: Sequence[tuple[float, Attempt]], clean: Attempt
    ) -> list[dict[str, Any]]:
        """How long each integration's runtime held work of ``run`` that a killed attempt left,
        and the setting behind it (the records' ``waits`` hooks, given each attempt with its
        wall-clock start and a clean run's, and the services' ``waits(workdir, thread, timeline)``:
        ``label``, ``setting``, ``unit``, ``from``/``to`` wall-clock seconds); empty when none can
        say."""
        services = self.services()
        found: list[dict[str, Any]] = []
        try:
            found.extend(record_waits(self.options.integrations, timeline, clean))
        except Exception:  # an account of the time, never a verdict
            pass
        for service in services:
            waits = getattr(service, "waits", None)
            if waits is None:
                continue
            try:
                found.extend(waits(run.workdir, run.thread, timeline))
            except Exception:  # an account of the time, never a verdict: the case stands as it is
                continue
        return found

    def release(self, run: RunContext) -> None:
        """``run`` is over: each service removes what the run left in it (a broker's keys), and
        its effect rows' schema is dropped."""
        self.effect_rows.release(run)
        services = self.services()
        for service in services:
            release = getattr(service, "release", None)
            if release is not None:
                release(run.workdir, run.thread)

    def close(self) -> None:
        """Stop the fork template, if any (it also stops by itself when the harness exits), and the
        integrations' services; remove the root we made if nothing was kept in it."""
        for service in self._services or ():
            service.close()
        self._services = None
        self.effect_rows.close()
        if self._template is not None:
            self._template.close()
            self._template = None
        self.workdirs.close()

    @property
    def root(self) -> Path:
        """Where workdirs go (see :class:`Workdirs`)."""
        return self.workdirs.root

    def env(self, run: RunContext) -> dict[str, str]:
        """The environment of a launch in ``run``: the harness's own, never an outer drill's."""
        # never an outer drill's channel; no proxy, no vendor's key (killdrill.isolation)
        inherited = envvars.without_drill(os.environ)
        env = isolated(inherited, self.options.pass_env)
        env.update(self.workdirs.temp_env(run.workdir))  # what it leaves goes with the run
        env.update(self.effect_rows.env(run))  # the run's own database (the user's --env wins)
        env.update(fill_env(self.options.env, run.thread, str(run.workdir)))
        env.update(
            {
                envvars.THREAD: run.thread,
                envvars.WORKDIR: str(run.workdir),
                envvars.LEDGER: self.effect_rows.ledger_url(self.workdirs.ledger_url(run.workdir)),
            }
        )
        if self.options.answer:
            env[envvars.ANSWERS] = json.dumps(list(self.options.answer))
        if self.options.integrations:
            env[envvars.INTEGRATIONS] = ",".join(self.options.integrations)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [bootstrap_dir(), env.get("PYTHONPATH")]))
        return env

    def spec(
        self, run: RunContext, number: int, fault: Fault | None, suffix: str = "", detect: bool = False
    ) -> LaunchSpec:
        """Attempt ``number`` of ``run``, armed with ``fault`` (``detect``: a clean run, traced)."""
        state = run.state
        env = {**self.env(run), **self._service_env(run)}
        return LaunchSpec(
            argv=fill(fleet.resume_argv(self.argv, self._resume_argv, number), run.thread, str(run.workdir)),
            env=detection_env(env, self.options.integrations, bootstrap_dir()) if detect else env,
            cwd=self.options.cwd,
            stdout_path=str(state / f"attempt-{number}{suffix}.stdout"),
            stderr_path=str(state / f"attempt-{number}{suffix}.stderr"),
            number=number,
            fault=fault,
            timeout_s=self.options.timeout,
            signal_name=self.options.signal,
            grace_s=self.options.grace,
            control_dir=str(state / "ctl"),
            template=self.fork_template(),
        )

    def plan(
        self, run: RunContext, schedule: Schedule, max_attempts: int, scene: Scene | None = None
    ) -> Plan | DeploymentCase:
        """The plan of ``run``'s case (what each step of its launch loop starts): the schedule's
        faults with the concurrent resumers, or, for a deployment, its one step, the whole case;
        its nemeses reach ``scene`` (the case's, with its kinds' case-long parts; None: a new one)."""
        if self.topology is not None:
            return self.deployment(run, schedule, max_attempts, scene=scene)
        return Plan(
            schedule,
            lambda number, fault, suffix: self.spec(run, number, fault, suffix=suffix),
            scene or self.scene(run),
            resumers=self.options.resumers,
            barrier=self.options.barrier,
        )

    def deploy(
        self, run: RunContext, schedule: Schedule, max_attempts: int, *, detect: bool = False
    ) -> Deployed:
        """Run one case of the deployment (``--serve``): its services and its driver, ``schedule``'s
        faults aimed at any of them, the driver run at most ``max_attempts`` times."""
        case = self.deployment(run, schedule, max_attempts, detect=detect)
        step = case.step(1)
        return case.whole(self.launch(run, step.specs, step.faults, case.scene))

    def deployment(
        self,
        run: RunContext,
        schedule: Schedule,
        max_attempts: int,
        *,
        detect: bool = False,
        scene: Scene | None = None,
    ) -> DeploymentCase:
        """One case of the deployment (``--serve``), ready to launch."""
        assert self.topology is not None
        ports: dict[str, int] = {}
        held = Ports()  # released by the case's teardown, once all its processes are gone
        try:
            processes = self.topology.processes(run.thread, str(run.workdir), ports, held.pick)
            check_faults(schedule, [p.name for p in processes])
            for p in processes:
                if p.ready is not None and p.ready.startswith("tcp:") and accepts(int(p.ready[4:])):
                    raise HarnessError(
                        f"service {p.name}: port {p.ready[4:]} is already taken (something accepts on"
                        " it before the service started); free it or let {port} pick one"
                    )
        except BaseException:
            held.release()
            raise

        def make_spec(process: Process, number: int) -> LaunchSpec:
            env = {**self.env(run), **self._service_env(run), **process.env}
            state = run.state
            return LaunchSpec(
                argv=process.argv,
                env=detection_env(env, self.options.integrations, bootstrap_dir()) if detect else env,
                cwd=self.options.cwd,
                stdout_path=str(state / f"attempt-{number}.stdout"),
                stderr_path=str(state / f"attempt-{number}.stderr"),
                number=number,
                fault=None,
                timeout_s=self.options.timeout,
                signal_name="KILL",
                grace_s=self.options.grace,
                control_dir=str(state / "ctl"),
                template=self.fork_template() if python_target(process.argv) else None,  # --launcher fork
            )

        case = DeploymentCase(
            processes,
            make_spec,
            schedule,
            max_attempts=max_attempts,
            restart_delay=self.options.restart_delay,
            ready_timeout=self.options.timeout,
            grace=self.options.grace,
            scene=scene or self.scene(run),
            release=held.release,
        )
        aborts = exit_aborts(self.options.integrations)
        case.known_abort = lambda r: (
            bool(r.trace) and any(rule.forgives(r.returncode, r.trace[-1].point) for rule in aborts)
        )
        # the --proxy targets with the case's {port:NAME} filled, for its launches (launch)
        case.scene.extra[UPSTREAMS] = self.topology.upstreams(run.thread, str(run.workdir), ports)
        return case

    def scene(self, run: RunContext) -> Scene:
        """What the nemeses of ``run``'s launches may reach of it (``faults.kinds.Scene``)."""
        return Scene(
            workdir=run.workdir,
            state=run.state,
            thread=run.thread,
            options=self.options,
            services=self.services,
        )

    def services(self) -> list[Service]:
        """The integrations' services as they are now (none before a launch started them)."""
        with self._lock:
            return list(self._services or ())

    def launch(
        self,
        run: RunContext,
        specs: list[LaunchSpec],
        faults: Sequence[Nemesis] = (),
        scene: Scene | None = None,
    ) -> list[Attempt]:
        """Run ``specs`` at once under one supervisor, ``faults`` acting on them, with the HTTP
        fakes around them (``scene.fakes`` while they run): always for the model (every attempt's
        model SDKs point at the model fake, scripted or not), and the effects' routes' URL given
        to the agent when asked; and the ``--proxy`` fault proxies, one port per launch (their
        targets with a deployment's ``{port:NAME}`` filled in ``scene.extra``; in ``scene.fakes``
        too, where a connection fault arms them)."""
        self.effect_rows.prepare(run)  # the run's own schema exists before anything writes to it
        servers: list[FakesServer | SmtpFake] = []
        wire = {"hooks": {"routes": dict(self.options.hooks), "key_header": self.options.hook_key_header}}
        url = self.workdirs.ledger_url(run.workdir)
        # a case's own ledger, written by the drill before its first attempt, is known usable
        checked = not os.path.isfile(url)
        http = FakesServer(url, wire=wire, model=self.model, check_ledger=checked)
        servers.append(http)
        http.start()
        own = {*self.options.env, *(n for n in self.options.pass_env if n in os.environ)}  # the user's win
        smtp: SmtpFake | None = None
        if self.options.smtp_fake:
            from killdrill.fakes.wire.smtp import SmtpFake  # the wire extra (aiosmtpd): only when asked

            (run.workdir / STATE_DIR).mkdir(parents=True, exist_ok=True)
            trust = str(run.workdir / STATE_DIR / "smtp-trust.pem")
            smtp = SmtpFake(self.workdirs.ledger_url(run.workdir), trust_file=trust)
            servers.append(smtp)
            smtp.start()

        proxies = Proxies((scene.extra.get(UPSTREAMS) if scene is not None else None) or self.options.proxy)

        def prepare(spec: LaunchSpec) -> None:
            """Each launch its own fakes URL and SMTP port: its calls are its own, however many run."""
            url, secret = http.attempt_url(id(spec))  # every launch talks to the model fake
            spec.env = {**spec.env, **{k: v for k, v in model_env(url).items() if k not in own}}
            if self.options.http_fakes or self.model is not None:
                spec.env = {**spec.env, envvars.FAKES_URL: url, envvars.FAKES_SECRET: secret}
            if smtp is not None:
                spec.env = {**spec.env, envvars.SMTP: smtp.attempt_address(id(spec))}
                implicit = smtp.attempt_tls_address(id(spec))
                if implicit is not None:
                    spec.env = {**spec.env, envvars.SMTPS: implicit}
                if smtp.trusted is not None and envvars.SSL_CERT_FILE not in own:
                    spec.env = {**spec.env, envvars.SSL_CERT_FILE: smtp.trusted}  # verifying agents trust it
            proxies.prepare(spec)
            spec.env = expand_env(spec.env, self.options.env)

        def on_start(running: Running) -> None:
            for server in servers:
                address, token = running.listener.address, running.listener.token
                server.bind(run.thread, running.spec.number, address, token, launch=id(running.spec))
            proxies.bind(running)  # its own port's during: points go to its channel

        if scene is not None:
            scene.fakes = [*servers, proxies]
        supervisor = Supervisor(on_attempt_start=on_start, prepare=prepare, faults=faults)
        try:
            return [self._forgive_exit_abort(a) for a in supervisor.run_many(specs)]
        finally:
            for server in servers:
                server.stop()
            proxies.close()
            if scene is not None:
                scene.fakes = []
