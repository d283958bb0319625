"""One driver's complete node service: claim core + inventory + kubelet plugin + slice publisher.

    service = DriverService.create(driver, claim_source, PluginOptions(...), cdi_root=..., publisher=...)
    serve_all([service, ...])          # what `topodra serve` does

Order matters. Start: recover the checkpoint and reconcile (a reboot emptied /var/run/cdi), so
that the driver knows what its claims hold before the inventory's first scan; then the plugin
(inventory, DRA socket, publisher, registration socket), so the kubelet never reaches a plugin
that does not know its own claims yet. Stop: the plugin first, then the claim core. The claim
core checks allocations against the inventory's published devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from topodra.common import logs
from topodra.common.inventory import Inventory
from topodra.common.kubeapi.claims import ClaimSource
from topodra.common.runtime import podresources
from topodra.common.runtime.claims import ClaimManager
from topodra.common.runtime.driver import Driver
from topodra.common.runtime.plugin import Plugin, PluginOptions, PluginStatus, Publisher, plugin_dir

DEFAULT_CDI_ROOT = Path("/var/run/cdi")


@dataclass
class DriverService:
    plugin: Plugin
    claims: ClaimManager
    reconcile_interval: float = 60.0

    @classmethod
    def create(
        cls,
        driver: Driver,
        claim_source: ClaimSource,
        options: PluginOptions,
        *,
        cdi_root: Path = DEFAULT_CDI_ROOT,
        state_dir: Path | None = None,
        publisher: Publisher | None = None,
        reconcile_interval: float = 60.0,
    ) -> DriverService:
        """`state_dir` defaults to the driver's plugin folder (host disk, survives reboots)."""
        pool = options.pool or options.node_name
        folder = state_dir or plugin_dir(driver.name, options)
        inventory = Inventory(driver)
        kubelet = podresources.KubeletPods(options.kubelet_root / podresources.SOCKET)
        claims = ClaimManager.create(
            driver,
            options.node_name,
            claim_source,
            folder,
            cdi_root,
            pools=[pool],
            devices=inventory.devices,
            kubelet_users=kubelet.in_use,
        )
        plugin = Plugin(driver, claims, options, publisher, inventory)
        return cls(plugin, claims, reconcile_interval)

    def start(self) -> None:
        report = self.claims.start()
        log = logs.get(__name__, driver=self.plugin.driver.name)
        # api_reachable says what an API call answered: null when none was made (no claim
        # to check), never a true that no call backs up
        log.info(
            "claims recovered",
            prepared=len(self.claims.prepared()),
            unprepared_by_reconcile=len(report.unprepared),
            api_reachable=(not report.unreachable) if report.contacted else None,
        )
        self.claims.start_reconciler(self.reconcile_interval)
        serves = self.plugin.serves
        try:
            if serves is not None:  # after restore, before the kubelet calls
                serves.start()
            self.plugin.start()
        except BaseException:
            if serves is not None:
                serves.stop()
            self.claims.close()
            raise

    def stop(self) -> None:
        serves = self.plugin.serves
        try:
            self.plugin.stop()
        finally:
            try:
                if serves is not None:
                    serves.stop()
            finally:
                self.claims.close()

    def status(self) -> PluginStatus:
        return self.plugin.status()
