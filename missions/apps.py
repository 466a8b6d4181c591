from django.apps import AppConfig


class MissionsConfig(AppConfig):
    name = "missions"
    verbose_name = "Missions and work packages"

    def repair_workspace(self, workspace):
        """The hook ``manage.py repair`` calls for each workspace (the command lives in
        ``quests``, which may not import this app): rebuild the workspace's mission projections
        from its mission journals. Returns a ``missions.repair.MissionRepair``."""
        from missions.repair import repair_missions

        return repair_missions(workspace)
