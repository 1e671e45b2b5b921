"""Repair: an audit report in; explanations of each failure and verified fixes of the template out.

``explain`` ties a failure to the template lines behind it (from the conversation the audit kept with the failure;
nothing of the audit runs again) and checks each label by its cause's own confirmation, ``explanations`` adds the
first example of each cause to a report, ``fixes`` edit the template, ``way_out`` chooses a setting or a verified fix,
``training_form`` gives the way out's template with generation blocks for trainers (placed in its own assistant
branches where they verify, computed otherwise).
"""
