# Joins the two first migrations of the work app (h-proof's probes, h-watch's watches).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("work", "0001_initial"), ("work", "0001_watch")]
    operations = []
