"""Setup for sapo_nb, read from settings.ini (nbdev 2.4 layout, no pkg_resources)."""
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

expected = 'version description keywords author author_email'.split()
missing = [o for o in expected if o not in cfg]
if missing: raise ValueError(f'settings.ini is missing: {missing}')

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
lic = licenses[cfg['license']]
min_python = cfg['min_python']
lib_path = cfg['lib_path']

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title(),
                 'License :: ' + lic[1]] +
                ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[lib_path, lib_path + '.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require={'dev': dev_requirements,
                    'hivemind': ['hivemind'],
                    'panel': ['ipywidgets', 'plotly'],
                    'tensorboard': ['tensorboardX>=2.6'],
                    'wandb': ['wandb>=0.19.10'],
                    'trackio': ['trackio>=0.43'],
                    'bench': ['trl==1.16.0', 'datasets']},
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': cfg.get('console_scripts', '').split(),
                  'nbdev': [f'{cfg["lib_path"]}={cfg["lib_path"]}._modidx:d']},
    version=cfg['version'],
    description=cfg['description'],
    keywords=cfg['keywords'],
    author=cfg['author'],
    author_email=cfg['author_email'],
)
